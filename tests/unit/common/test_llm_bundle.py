"""The canonical LLM and the "hf" model format: the generator's directory is what a server loads (config, weights,
tokenizer), the same seed gives the same bytes, and the checks refuse what a server would execute or what leaves the
directory."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path

import pytest

from benchfleet.generate.llmgen import BOS, LlamaSpec, generate
from common.formats import hfbundle

SMALL = LlamaSpec(layers=2, hidden=64, heads=2, kv_heads=1, intermediate=128, vocab=1024, context=256, seed=3)


@pytest.fixture(scope="module")
def bundle() -> tuple[bytes, dict]:  # type: ignore[type-arg]
    return generate(SMALL)


def test_the_generated_directory_is_a_llama_with_its_own_tokenizer(bundle: tuple[bytes, dict]) -> None:  # type: ignore[type-arg]
    data, meta = bundle
    params = hfbundle.describe(io.BytesIO(data), limit_bytes=10**8)
    assert params.architecture == "LlamaForCausalLM" and params.model_type == "llama"
    assert (params.layers, params.hidden, params.context_length) == (2, 64, 256)
    head_dim = 64 // 2
    per_layer = 64 * 64 + 2 * (head_dim * 64) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert params.parameters == meta["parameters"] == 2 * params.vocab_size * 64 + 2 * per_layer + 64
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        cfg = json.loads(archive.read("config.json"))
        tok_cfg = json.loads(archive.read("tokenizer_config.json"))
        tokenizer_json = archive.read("tokenizer.json").decode()
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    assert cfg["vocab_size"] == tokenizer.get_vocab_size() == params.vocab_size
    assert cfg["bos_token_id"] == tokenizer.token_to_id(BOS) and "chat_template" in tok_cfg
    ids = tokenizer.encode("kalo mine rutavo").ids
    assert ids[0] == cfg["bos_token_id"] and tokenizer.decode(ids, skip_special_tokens=True).strip() == "kalo mine rutavo"


def test_the_same_seed_gives_the_same_bytes_and_another_seed_others(bundle: tuple[bytes, dict]) -> None:  # type: ignore[type-arg]
    assert generate(SMALL)[0] == bundle[0]
    other = LlamaSpec(**{**SMALL.__dict__, "seed": 4})
    assert generate(other)[0] != bundle[0]


def test_a_shape_that_cannot_be_a_llama_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple of heads"):
        LlamaSpec(hidden=100, heads=3)
    with pytest.raises(ValueError, match="vocab"):
        LlamaSpec(vocab=10)


def _rezip(data: bytes, *, add: dict[str, bytes] | None = None, drop: tuple[str, ...] = (), prefix: str = "",
           link: str | None = None) -> bytes:  # fmt: skip
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename not in drop:
                dst.writestr(prefix + info.filename, src.read(info))
        for name, content in (add or {}).items():
            dst.writestr(name, content)
        if link is not None:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            dst.writestr(info, "/etc/passwd")
    return out.getvalue()


@pytest.mark.parametrize("change,expected", [
    ({"add": {"modeling_evil.py": b"import os"}}, "code and pickled weights"),
    ({"add": {"pytorch_model.bin": b"\x80\x04"}}, "code and pickled weights"),
    ({"add": {"../escape.json": b"{}"}}, "inside the model directory"),
    ({"add": {"/abs.json": b"{}"}}, "inside the model directory"),
    ({"add": {"weights.exe": b"MZ"}}, "not a model file"),
    ({"link": "tokenizer2.json"}, "links are not accepted"),
    ({"drop": ("config.json",)}, "no config.json"),
    ({"drop": ("tokenizer.json",)}, "no tokenizer"),
    ({"drop": ("model.safetensors",)}, "no .safetensors"),
    ({"add": {"special_tokens_map.json": b"{not json"}}, "is not JSON"),
])  # fmt: skip
def test_what_a_server_would_execute_or_that_leaves_the_directory_is_refused(
    bundle: tuple[bytes, dict], change: dict, expected: str  # type: ignore[type-arg]
) -> None:
    drop = tuple(change.get("drop", ())) + tuple(n for n in change.get("add", {}) if n == "special_tokens_map.json")
    bad = _rezip(bundle[0], add=change.get("add"), drop=drop, link=change.get("link"))
    with pytest.raises(hfbundle.HfBundleError, match=expected):
        hfbundle.describe(io.BytesIO(bad), limit_bytes=10**8)


def test_custom_code_in_the_config_and_oversized_unpacking_are_refused(bundle: tuple[bytes, dict]) -> None:  # type: ignore[type-arg]
    with zipfile.ZipFile(io.BytesIO(bundle[0])) as archive:
        cfg = json.loads(archive.read("config.json"))
    remote = _rezip(bundle[0], drop=("config.json",), add={"config.json": json.dumps({**cfg, "auto_map": {"x": "y"}}).encode()})
    with pytest.raises(hfbundle.HfBundleError, match="auto_map"):
        hfbundle.describe(io.BytesIO(remote), limit_bytes=10**8)
    with pytest.raises(hfbundle.HfBundleError, match="unpack to more than"):
        hfbundle.describe(io.BytesIO(bundle[0]), limit_bytes=1000)
    with pytest.raises(hfbundle.HfBundleError, match="not a zip"):
        hfbundle.describe(io.BytesIO(b"not a zip"), limit_bytes=10**8)


def test_a_zipped_directory_unpacks_to_its_files_and_nothing_else(bundle: tuple[bytes, dict], tmp_path: Path) -> None:  # type: ignore[type-arg]
    nested = _rezip(bundle[0], prefix="my-model/")
    assert hfbundle.describe(io.BytesIO(nested), limit_bytes=10**8).architecture == "LlamaForCausalLM"
    root = hfbundle.extract(io.BytesIO(nested), tmp_path / "m", limit_bytes=10**8)
    names = sorted(p.name for p in root.iterdir())
    assert names == sorted(["config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                            "tokenizer.json", "tokenizer_config.json"])  # fmt: skip
    assert not any(p.is_symlink() for p in root.rglob("*"))
