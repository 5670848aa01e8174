"""The job spec: one pydantic model validates the YAML, the REST body, the Celery payload and the Mongo document."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from common.errors import InvalidSpec

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"

# Upper bounds that keep one submission from occupying a follower for days (configurable limits come later).
MAX_RATE = 100_000.0
MAX_DURATION_S = 3_600.0
MAX_BATCH = 4_096
MAX_POINTS = 512
MAX_SPEC_BYTES = 256 * 1024

BackendName = Literal["onnxruntime"]
KNOWN_BACKENDS: tuple[str, ...] = ("onnxruntime",)

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Turn `10s`, `500ms`, `2m`, `1h` or a bare number of seconds into seconds."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 10s, 500ms or 2m")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match:
            return float(match.group(1)) * _UNIT_S[match.group(2)]
    raise ValueError("must be a duration such as 10s, 500ms or 2m")


Seconds = Annotated[float, BeforeValidator(parse_duration)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRef(_Strict):
    """A model in the repository: `name:version`, or `name` for the latest version."""

    ref: str

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        # YAML writes `model: resnet50:1`; the stored form is {"ref": "resnet50:1"}. Accept both.
        return {"ref": value} if isinstance(value, str) else value

    @field_validator("ref")
    @classmethod
    def _check_ref(cls, value: str) -> str:
        name, _, version = value.partition(":")
        if not re.match(NAME_PATTERN, name):
            raise ValueError("must be name or name:version (letters, digits, . _ -)")
        if version and not re.match(VERSION_PATTERN, version):
            raise ValueError("version must be letters, digits, . _ -")
        return value

    @property
    def name(self) -> str:
        return self.ref.partition(":")[0]

    @property
    def version(self) -> str | None:
        """The pinned version, or None for the latest."""
        return self.ref.partition(":")[2] or None


class LoadSpec(_Strict):
    """How load is offered: an open-loop arrival process at one rate or a list of rates."""

    pattern: Literal["poisson", "constant"] = "poisson"
    rate: list[float]  # a scalar in YAML becomes a one-entry list
    duration: Annotated[Seconds, Field(gt=0, le=MAX_DURATION_S)] = 10.0
    warmup: Annotated[Seconds, Field(ge=0, le=MAX_DURATION_S)] = 2.0
    max_concurrency: Annotated[int, Field(gt=0, le=4096)] = 256

    @field_validator("rate", mode="before")
    @classmethod
    def _check_rate(cls, value: Any) -> list[float]:
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("must name at least one rate")
        for item in values:
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise ValueError(f"must be a number of requests per second, got {item!r}")
            if not item > 0:
                raise ValueError("must be > 0")
            if item > MAX_RATE:
                raise ValueError(f"must be <= {MAX_RATE:g}")
        if len(set(values)) != len(values):
            raise ValueError("must not repeat an entry")
        return [float(item) for item in values]

    @property
    def rates(self) -> list[float]:
        return self.rate


class SLO(_Strict):
    """Latency objectives a point must meet (measured from the intended send time)."""

    p50_ms: Annotated[float, Field(gt=0)] | None = None
    p99_ms: Annotated[float, Field(gt=0)] | None = None


class JobSpec(_Strict):
    """A benchmark submission; lists in it form a grid of benchmark points."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    model: ModelRef
    backends: Annotated[list[BackendName], Field(min_length=1)] = ["onnxruntime"]
    batch_sizes: Annotated[list[Annotated[int, Field(gt=0, le=MAX_BATCH)]], Field(min_length=1)] = [1]
    load: LoadSpec
    slo: SLO | None = None
    seed: Annotated[int, Field(ge=0, lt=2**32)] = 0

    @field_validator("backends", "batch_sizes")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        if len(set(value)) != len(value):
            raise ValueError("must not repeat an entry")
        return value

    @model_validator(mode="after")
    def _grid_size(self) -> JobSpec:
        n = len(self.backends) * len(self.batch_sizes) * len(self.load.rates)
        if n > MAX_POINTS:
            raise ValueError(f"grid has {n} points; at most {MAX_POINTS} are allowed")
        return self


class PointSpec(_Strict):
    """One benchmark point of a job's grid, as the follower runs it."""

    index: int
    backend: BackendName
    batch_size: int
    pattern: Literal["poisson", "constant"]
    rate: float
    duration_s: float
    warmup_s: float
    max_concurrency: int
    seed: int


def expand(spec: JobSpec) -> list[PointSpec]:
    """Expand the grid backends × batch sizes × rates into points, in a stable order."""
    points: list[PointSpec] = []
    for backend in spec.backends:
        for batch in spec.batch_sizes:
            for rate in spec.load.rates:
                index = len(points)
                points.append(
                    PointSpec(
                        index=index,
                        backend=backend,
                        batch_size=batch,
                        pattern=spec.load.pattern,
                        rate=rate,
                        duration_s=spec.load.duration,
                        warmup_s=spec.load.warmup,
                        max_concurrency=spec.load.max_concurrency,
                        seed=(spec.seed * 1_000_003 + index) % 2**32,
                    )
                )
    return points


def estimate_seconds(spec: JobSpec) -> float:
    """A first estimate of a job's run time: every point's warm-up and duration plus a start cost per backend."""
    per_point = spec.load.warmup + spec.load.duration
    n_points = len(spec.backends) * len(spec.batch_sizes) * len(spec.load.rates)
    return n_points * per_point + 5.0 * len(spec.backends)


_MESSAGES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "extra_forbidden": "unknown field",
    "missing": "field required",
}


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    """Pydantic errors as [{"field": "load.rate", "message": ...}] with dotted paths."""
    out = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "constrained-")))]
        # Drop pydantic's union-branch labels (e.g. "float", "list[...]") so the path names the field.
        loc = [p for p in loc if not (p in {"float", "int", "str"} or p.startswith(("list[", "tagged-union")))]
        message = _MESSAGES[err["type"]].format(**err.get("ctx", {})) if err["type"] in _MESSAGES else err["msg"]
        message = message.removeprefix("Value error, ")
        out.append({"field": ".".join(loc) or "(root)", "message": message})
    return out


def parse_spec(data: Any) -> JobSpec:
    """Validate a decoded document as a JobSpec, raising InvalidSpec that names the field."""
    if not isinstance(data, dict):
        raise InvalidSpec("job spec must be a mapping of fields", field="(root)")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        errors = field_errors(exc)
        first = errors[0]
        raise InvalidSpec(f"{first['field']}: {first['message']}", field=first["field"], details=errors) from None


def load_yaml(text: str | bytes) -> Any:
    """Parse YAML safely (no tags, no objects), refusing oversized documents and alias bombs."""
    if len(text) > MAX_SPEC_BYTES:
        raise InvalidSpec(f"spec is larger than {MAX_SPEC_BYTES} bytes", field="(body)")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidSpec("spec is not UTF-8 text", field="(body)") from None
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None and _count_nodes(node, budget=10_000) < 0:
                raise InvalidSpec("spec has too many nodes (aliases expand too far)", field="(body)")
            return loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidSpec(f"malformed YAML{where}: {problem}", field="(body)") from None


def _count_nodes(node: yaml.Node, budget: int) -> int:
    """Walk the node graph counting visits (aliases re-visit); return the budget left, negative if exceeded."""
    stack = [node]
    while stack:
        current = stack.pop()
        budget -= 1
        if budget < 0:
            return budget
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.append(key)
                stack.append(value)
    return budget


def parse_spec_yaml(text: str | bytes) -> JobSpec:
    """YAML text to a validated JobSpec."""
    return parse_spec(load_yaml(text))
