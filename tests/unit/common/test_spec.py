"""The job spec: validation names the field, grids expand, YAML is parsed safely."""

from __future__ import annotations

import json

import pytest

from common.errors import InvalidSpec
from common.spec.grid import estimate_seconds, expand
from common.spec.job import MAX_POINTS
from common.spec.load import parse_duration
from common.spec.parse import load_yaml, parse_spec, parse_spec_yaml

EXAMPLE = """
name: mlp-onnx-smoke
model: {ref: mlp-small:1}
backends: [onnxruntime]
batch_sizes: [1, 8]
load: {pattern: poisson, rate: 200, duration: 10s, warmup: 2s}
slo: {p99_ms: 20}
"""


def _base(**overrides: object) -> dict:
    spec: dict = {"name": "j", "model": {"ref": "m:1"}, "load": {"rate": 100}}
    spec.update(overrides)
    return spec


def test_example_parses_with_units_and_defaults() -> None:
    spec = parse_spec_yaml(EXAMPLE)
    assert spec.model.name == "mlp-small" and spec.model.version == "1"
    assert spec.load.rates == [200.0]
    assert spec.load.duration == 10.0 and spec.load.warmup == 2.0
    assert spec.slo is not None and spec.slo.p99_ms == 20


def test_model_ref_without_version_means_latest() -> None:
    assert parse_spec(_base(model={"ref": "resnet"})).model.version is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), (3, 3.0), ("1.5s", 1.5)]
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_grid_expands_backends_batches_rates_in_stable_order() -> None:
    spec = parse_spec(_base(batch_sizes=[1, 4, 8], load={"rate": [50, 100]}, seed=7))
    points = expand(spec)
    assert [(p.batch_size, p.rate) for p in points] == [(1, 50), (1, 100), (4, 50), (4, 100), (8, 50), (8, 100)]
    assert [p.index for p in points] == list(range(6))
    assert len({p.seed for p in points}) == 6, "each point gets its own seeded stream"
    assert expand(spec) == points, "expansion is deterministic"
    assert estimate_seconds(spec) > 6 * (spec.load.duration + spec.load.warmup) - 1e-9


@pytest.mark.parametrize(
    ("doc", "field", "fragment"),
    [
        (_base(load={"rate": -1}), "load.rate", "must be > 0"),
        (_base(load={"rate": 0}), "load.rate", "must be > 0"),
        (_base(load={"rate": [10, -2]}), "load.rate", "must be > 0"),
        (_base(load={"rate": "fast"}), "load.rate", "number"),
        (_base(load={"rate": 10, "duration": "soon"}), "load.duration", "duration"),
        (_base(load={"rate": 10, "duration": -5}), "load.duration", "must be > 0"),
        (_base(batch_sizes=[0]), "batch_sizes.0", "must be > 0"),
        (_base(batch_sizes=[1, 1]), "batch_sizes", "repeat"),
        (_base(batch_sizes="eight"), "batch_sizes", "list"),
        (_base(backends=["nosuch"]), "backends.0", "onnxruntime"),
        (_base(backends=[]), "backends", "at least 1"),
        (_base(colour="blue"), "colour", "unknown field"),
        (_base(load={"rate": 10, "burst": 3}), "load.burst", "unknown field"),
        (_base(load={"pattern": "closed", "concurrency": [2], "busy_wait": True}), "load.busy_wait", "open loop"),
        (_base(name="../etc/passwd"), "name", "pattern"),
        (_base(model={"ref": "a/b"}), "model.ref", "name"),
        ({"model": {"ref": "m"}, "load": {"rate": 1}}, "name", "required"),
        (_base(batch_sizes=list(range(1, 101)), load={"rate": [float(r) for r in range(1, 7)]}), "(root)", str(MAX_POINTS)),
    ],
)
def test_bad_specs_name_the_field(doc: dict, field: str, fragment: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_spec(doc)
    assert info.value.field == field
    assert fragment in info.value.message
    assert info.value.status == 422


def test_malformed_yaml_names_the_line() -> None:
    with pytest.raises(InvalidSpec, match="line 3"):
        parse_spec_yaml("name: x\nload: {rate: [1, 2\n")


def test_a_scalar_yaml_resolves_but_cannot_build_is_refused_not_a_crash() -> None:
    """`2026-13-45` resolves as a timestamp and failed to build with a bare ValueError (an HTTP 500 at submission)."""
    with pytest.raises(InvalidSpec, match="malformed YAML: month must be in 1..12") as caught:
        parse_spec_yaml("model: m:1\nname: 2026-13-45\n")
    assert caught.value.field == "(body)" and caught.value.status == 422


def test_yaml_tags_that_build_objects_are_refused() -> None:
    with pytest.raises(InvalidSpec, match="constructor"):
        parse_spec_yaml("!!python/object/apply:os.system ['true']")


def test_alias_bomb_is_refused_before_expansion() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for level, prev in zip("bcdefg", "abcdef", strict=True):
        bomb += f"{level}: &{level} [" + ", ".join(f"*{prev}" for _ in range(9)) + "]\n"
    with pytest.raises(InvalidSpec, match="too many nodes"):
        parse_spec_yaml(bomb)


def test_a_key_given_twice_is_refused_naming_it_and_its_line() -> None:
    """YAML's loaders keep the last of two equal keys: `duration: 60s` then `duration: 1s` once ran for one second."""
    twice = "name: x\nmodel: m:1\nload:\n  duration: 60s\n  rate: 50\n  duration: 1s\n"
    with pytest.raises(InvalidSpec, match=r"load.duration: given twice \(again at line 6\)") as caught:
        parse_spec_yaml(twice)
    assert caught.value.field == "load.duration"
    with pytest.raises(InvalidSpec, match=r"slo.p99_ms: given twice"):
        parse_spec_yaml("name: x\nmodel: m:1\nslo: {p99_ms: 10, p99_ms: 20}\n")
    assert load_yaml("base: &b {a: 1}\nk:\n  <<: *b\n  z: 2\n") == {"base": {"a": 1}, "k": {"a": 1, "z": 2}}  # a merge


def test_oversized_document_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="larger than"):
        parse_spec_yaml("name: x\n" + "#" * 300_000)


def test_non_mapping_document_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="mapping"):
        parse_spec_yaml("- a\n- b\n")


# -- load patterns, ladders, closed loop, search -----------------------------------------------------------------


def test_patterns_expand_with_their_shape() -> None:
    spec = parse_spec(_base(load={"pattern": "gamma", "rate": [100, 200], "cv": 3}))
    assert [(p.pattern, p.rate, p.cv) for p in expand(spec)] == [("gamma", 100, 3), ("gamma", 200, 3)]
    ramp = expand(parse_spec(_base(load={"pattern": "ramp", "rate": 10, "rate_end": 500})))[0]
    assert ramp.rate_end == 500
    trace = expand(parse_spec(_base(load={"pattern": "trace", "trace": [0.1, 0.2, 0.2, 0.3], "duration": "1s"})))
    assert trace[0].trace_s == [0.1, 0.2, 0.2, 0.3] and trace[0].rate == 4.0


def test_stability_windows_must_hold_a_p99_claim() -> None:
    (point,) = expand(parse_spec(_base(load={"rate": 100, "window": "5s", "stability": {"windows": 3}})))
    assert point.stability is not None and point.window_s == 5.0
    # Closed loop and non-steady patterns have no fixed rate x window: not checked.
    assert expand(parse_spec(_base(load={"pattern": "closed", "concurrency": [2], "stability": {}})))[0].stability


def test_closed_loop_concurrency_ladder() -> None:
    points = expand(parse_spec(_base(load={"pattern": "closed", "concurrency": [1, 4, 16]})))
    assert [(p.concurrency, p.rate) for p in points] == [(1, 0.0), (4, 0.0), (16, 0.0)]


def test_search_is_one_point_and_needs_an_slo() -> None:
    spec = parse_spec(_base(load={"search": {"low": 50, "high": 800}}, slo={"p99_ms": 20}))
    (point,) = expand(spec)
    assert point.search is not None and point.search.high == 800
    assert estimate_seconds(spec) >= point.search.max_steps * spec.load.duration
    with pytest.raises(InvalidSpec, match="load.search"):
        parse_spec(_base(load={"search": {"low": 50, "high": 800}}))


@pytest.mark.parametrize(
    ("load", "field", "fragment"),
    [
        ({"pattern": "ramp", "rate": 10}, "load.rate_end", "required"),
        ({"pattern": "spike", "rate": 10}, "load.spike_rate", "required"),
        ({"pattern": "trace"}, "load.trace", "required"),
        ({"pattern": "trace", "trace": [0.1], "rate": 5}, "load.rate", "must not"),
        ({"pattern": "trace", "trace": [0.3, 0.1, 0.2]}, "load.trace", "entry 1 (0.1 s) is earlier"),
        ({"rate": [100, 1000], "stability": {}}, "load.stability", "set load.window to at least 4.6 s"),
        ({"rate": 2, "window": "60s", "stability": {}}, "load.stability", "rate must be at least 8 req/s"),
        ({"pattern": "closed"}, "load.concurrency", "required"),
        ({"pattern": "closed", "concurrency": [0]}, "load.concurrency", "whole numbers"),
        ({"rate": 10, "concurrency": 4}, "load.concurrency", "closed"),
        ({"pattern": "gamma", "rate": 10, "cv": 0}, "load.cv", "must be > 0"),
        ({"pattern": "poisson"}, "load.rate", "required"),
        ({"search": {"low": 500, "high": 100}}, "load.search", "below"),
        ({"pattern": "burst", "rate": 1}, "load.pattern", "poisson"),
        ({"rate": 10, "cap_policy": "ignore"}, "load.cap_policy", "wait"),
    ],
)
def test_bad_load_shapes_name_the_field(load: dict, field: str, fragment: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_spec(_base(load=load, slo={"p99_ms": 5}))
    assert info.value.field == field, info.value
    assert fragment in str(info.value)


SERVER_IMAGES = {"source": "sample_images", "preprocess": "image_imagenet", "postprocess": "topk", "processing": "server"}


def test_server_side_processing_is_refused_where_the_server_cannot_run_it() -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_spec(_base(backends=["onnxruntime", "tfserving"], data=SERVER_IMAGES))
    assert info.value.field == "data" and info.value.status == 422
    assert "not supported by tfserving (TF Serving runs only the SavedModel graph" in info.value.message


def test_server_side_processing_places_the_processors_on_the_server() -> None:
    points = expand(parse_spec(_base(backends=["onnxruntime", "torchscript", "triton"], data=SERVER_IMAGES)))
    assert {(p.server.preprocess, p.server.postprocess) for p in points} == {("image_imagenet", "topk")}
    client = expand(parse_spec(_base(data={**SERVER_IMAGES, "processing": "client"})))
    assert (client[0].server.preprocess, client[0].server.postprocess) == (None, None)


@pytest.mark.parametrize("deep", [
    "name: x\nload: " + "[" * 500 + "]" * 500 + "\n",  # flow style
    "name: x\nload:\n" + "".join("  " * (k + 1) + f"k{k}:\n" for k in range(500)) + "  " * 501 + "v\n",  # block style
])  # fmt: skip
def test_yaml_nested_past_any_spec_is_refused_naming_its_depth(deep: str) -> None:
    # 500 levels once overflowed the YAML composer's recursion (a 500, the connection dropped): now a clear refusal.
    with pytest.raises(InvalidSpec, match=r"nests deeper than 64 levels \(line \d+\)") as caught:
        parse_spec_yaml(deep)
    assert caught.value.field == "(body)"


def _paths(schema: dict, defs: dict, prefix: str = "", depth: int = 0) -> list[str]:  # type: ignore[type-arg]
    """Every field path of a JSON schema (objects followed through $ref, anyOf and their properties)."""
    out: list[str] = []
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        out.append(path)
        for option in [sub, *sub.get("anyOf", []), *sub.get("allOf", [])]:
            ref = option.get("$ref") or option.get("items", {}).get("$ref") if isinstance(option, dict) else None
            if ref and depth < 3:
                out += _paths(defs[ref.split("/")[-1]], defs, path + ".", depth + 1)
    return sorted(set(out))


def test_any_value_of_any_type_in_any_field_is_a_refusal_naming_a_field_never_a_crash() -> None:
    from common.spec.job import JobSpec

    schema = JobSpec.model_json_schema()
    paths = _paths(schema, schema.get("$defs", {}))
    assert len(paths) > 60 and "server.execution_provider" in paths and "llm.shared_prefix.tokens" in paths
    base = {"name": "x", "model": "m:1", "load": {"rate": 10, "duration": "1s"}}
    odd: list[object] = [[], {}, "x\n", -1, 1e309, True, None, [{}], {"a": []}, "\u0000", 10**30]
    for path in paths:
        for value in odd:
            doc = json.loads(json.dumps(base))
            parts = path.split(".")
            node = doc
            for part in parts[:-1]:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[parts[-1]] = value
            try:
                parse_spec(doc)
            except InvalidSpec as exc:
                assert exc.field, (path, value)


def test_a_model_reference_ending_in_a_newline_is_refused() -> None:
    with pytest.raises(InvalidSpec) as caught:
        parse_spec_yaml('name: x\nmodel: "m:1\\n"\nload: {allow_short: true, rate: 10, duration: 1s}\n')
    assert caught.value.field.startswith("model")


def test_specs_stored_before_the_search_redesign_still_read() -> None:
    """The leader re-reads every stored spec: what was valid before the search took over-and-SLO criteria still is."""
    from common.spec.parse import parse_spec

    base = {"name": "old", "model": "m:1"}
    assert parse_spec({**base, "load": {"rate": 10}, "slo": {}}).slo is not None  # an empty SLO: nothing to judge
    one = parse_spec({**base, "load": {"search": {"low": 10, "high": 100, "max_steps": 1}}, "slo": {"p99_ms": 20}})
    assert one.load.search is not None and one.load.search.max_steps == 1
    ramp_load = {"pattern": "ramp", "rate_end": 50, "search": {"low": 10, "high": 100}}
    ramp = parse_spec({**base, "load": ramp_load, "slo": {"p99_ms": 20}})
    assert ramp.load.search is not None
    target = {"url": "http://127.0.0.1:1", "protocol": "openai"}
    llm_target = parse_spec({**base, "load": {"rate": 10}, "target": target, "slo": {"ttft_ms": 500}})
    assert llm_target.slo is not None and llm_target.slo.ttft_ms == 500
