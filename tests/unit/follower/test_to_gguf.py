"""The Hugging Face Llama → GGUF conversion llama.cpp serves (follower/convert/to_gguf.py): the file read back holds
the model's hyperparameters, its whole tokenizer in id order and every tensor under llama.cpp's name; the query/key
permutation makes GGML's interleaved RoPE compute what Hugging Face's rotate-half RoPE computes; anything it does not
know is refused by name."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

from benchfleet.generate.llmgen import BOS, EOS, LlamaSpec, generate
from follower.convert.to_gguf import convert, gguf_name, permute_rope

SPEC = LlamaSpec(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=96, vocab=1024, context=512, seed=3)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle, _ = generate(SPEC)
    out = tmp_path_factory.mktemp("llama") / "model"
    zipfile.ZipFile(io.BytesIO(bundle)).extractall(out)
    return out


def _field(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def test_the_file_holds_the_models_shape_tokenizer_and_tensors(model_dir: Path, tmp_path: Path) -> None:
    out = convert(model_dir, tmp_path / "m.gguf")
    reader = gguf.GGUFReader(str(out))
    assert _field(reader, "general.architecture") == "llama"
    expected = {
        "llama.block_count": 2,
        "llama.embedding_length": 64,
        "llama.feed_forward_length": 96,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.context_length": 512,
        "llama.rope.dimension_count": 16,
    }
    assert {k: _field(reader, k) for k in expected} == expected
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"] | {a["content"]: a["id"] for a in tok["added_tokens"]}
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert isinstance(tokens, list) and len(tokens) == max(vocab.values()) + 1
    assert all(tokens[i] == t for t, i in vocab.items())
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.merges") == [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    assert (_field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.eos_token_id")) == (
        vocab[BOS],
        vocab[EOS],
    )
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    types = _field(reader, "tokenizer.ggml.token_type")
    word = next(i for t, i in tok["model"]["vocab"].items() if t.startswith("Ġ"))
    assert isinstance(types, list) and (types[vocab[BOS]], types[word]) == (3, 1)  # control, normal
    assert "bos_token" in str(_field(reader, "tokenizer.chat_template"))
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 2 + 2 * 9 + 1
    assert tensors["blk.1.attn_k.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32  # norms stay float32
    # GGUF lists a matrix's dimensions innermost first: the key projection is (hidden) x (kv heads x head dim).
    assert [int(d) for d in tensors["blk.1.attn_k.weight"].shape] == [64, 32]
    assert not list(tmp_path.glob("*.partial"))


def test_other_types_and_what_it_refuses(model_dir: Path, tmp_path: Path) -> None:
    f32 = gguf.GGUFReader(str(convert(model_dir, tmp_path / "f32.gguf", dtype="float32")))
    assert {t.tensor_type for t in f32.tensors} == {gguf.GGMLQuantizationType.F32}
    bf16 = gguf.GGUFReader(str(convert(model_dir, tmp_path / "bf16.gguf", dtype="bfloat16")))
    assert gguf.GGMLQuantizationType.BF16 in {t.tensor_type for t in bf16.tensors}
    with pytest.raises(ValueError, match="server.llm.dtype"):
        convert(model_dir, tmp_path / "x.gguf", dtype="int4")
    with pytest.raises(ValueError, match="not part of a Llama model"):
        gguf_name("model.layers.0.mlp.experts.0.w1.weight")
    extra = tmp_path / "extra"
    extra.mkdir()
    for f in model_dir.iterdir():
        (extra / f.name).write_bytes(f.read_bytes())
    save_file({"model.layers.0.mlp.experts.0.w1.weight": np.zeros((2, 2), dtype=np.float16)}, str(extra / "z.safetensors"))
    with pytest.raises(ValueError, match="not part of a Llama model"):  # found while writing: nothing half-written stays
        convert(extra, tmp_path / "e.gguf")
    assert not (tmp_path / "e.gguf").exists() and not (tmp_path / "e.gguf.partial").exists()
    assert gguf_name("model.layers.3.self_attn.rotary_emb.inv_freq") is None
    other = tmp_path / "other"
    other.mkdir()
    for f in model_dir.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    config = json.loads((other / "config.json").read_text()) | {"architectures": ["MistralForCausalLM"]}
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="this model is \\['MistralForCausalLM'\\]"):
        convert(other, tmp_path / "o.gguf")
    (other / "config.json").write_text((model_dir / "config.json").read_text())
    tok = json.loads((other / "tokenizer.json").read_text())
    tok["model"]["type"] = "Unigram"
    (other / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ValueError, match="byte-level BPE"):
        convert(other, tmp_path / "o.gguf")
    assert not (tmp_path / "o.gguf").exists()


@pytest.mark.parametrize(("dtype", "qtype", "file_type"), [("q8_0", "Q8_0", "MOSTLY_Q8_0"), ("q4_0", "Q4_0", "MOSTLY_Q4_0")])
def test_quantised_types_hold_each_matrix_in_blocks_that_read_back_near_its_weights(
    model_dir: Path, tmp_path: Path, dtype: str, qtype: str, file_type: str
) -> None:
    from safetensors.numpy import load_file

    out = convert(model_dir, tmp_path / f"{dtype}.gguf", dtype=dtype)
    reader = gguf.GGUFReader(str(out))
    kind = getattr(gguf.GGMLQuantizationType, qtype)
    assert _field(reader, "general.file_type") == getattr(gguf.LlamaFileType, file_type)
    weights = load_file(model_dir / "model.safetensors")
    up = weights["model.layers.0.mlp.up_proj.weight"].astype(np.float32)  # [96, 64]: rows of two 32-wide blocks
    tensors = {t.name: t for t in reader.tensors}
    assert {t.tensor_type for n, t in tensors.items() if t.data.ndim > 1 and "norm" not in n} == {kind}
    assert tensors["blk.0.ffn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    back = gguf.quants.dequantize(tensors["blk.0.ffn_up.weight"].data, kind).reshape(up.shape)
    scale = np.abs(up).reshape(-1, 32).max(axis=1, keepdims=True)  # each block's own scale bounds its error
    error = np.abs(back - up).reshape(-1, 32) / scale
    # Q8_0: half a step of amax/127, plus the float16 scale's rounding (2^-11 relative) over 127 steps. Q4_0: its grid
    # is -8..7 steps of amax/8, so the block's extreme of the other sign is clipped a whole step: amax/8 (and the
    # scale's rounding over 8 steps).
    bound = {"q8_0": 1 / 254 + 2**-11, "q4_0": 1 / 8 + 8 * 2**-11}[dtype]
    assert 0 < error.max() <= bound
    assert out.stat().st_size < convert(model_dir, tmp_path / "f16.gguf", dtype="float16").stat().st_size


def _rope_half(x: np.ndarray, pos: int, theta: float = 10000.0) -> np.ndarray:
    """Hugging Face's RoPE: the head's first half rotated with its second (rotate_half)."""
    d = x.shape[-1]
    angle = pos * theta ** (-np.arange(0, d, 2) / d)
    cos, sin = np.concatenate([np.cos(angle)] * 2), np.concatenate([np.sin(angle)] * 2)
    rotated = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)
    return x * cos + rotated * sin


def _rope_interleaved(x: np.ndarray, pos: int, theta: float = 10000.0) -> np.ndarray:
    """GGML's RoPE for llama: neighbouring pairs (x0, x1), (x2, x3), ... rotated."""
    d = x.shape[-1]
    angle = pos * theta ** (-np.arange(0, d, 2) / d)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angle) - odd * np.sin(angle)
    out[..., 1::2] = even * np.sin(angle) + odd * np.cos(angle)
    return out


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2)])
def test_the_permuted_projections_give_the_same_attention_scores_under_ggmls_rope(heads: int, kv_heads: int) -> None:
    rng = np.random.default_rng(0)
    hidden, head_dim = 64, 16
    wq, wk = rng.standard_normal((heads * head_dim, hidden)), rng.standard_normal((kv_heads * head_dim, hidden))
    x_q, x_k = rng.standard_normal(hidden), rng.standard_normal(hidden)
    q_hf, k_hf = (wq @ x_q).reshape(heads, head_dim), (wk @ x_k).reshape(kv_heads, head_dim)
    q_gg = (permute_rope(wq, heads) @ x_q).reshape(heads, head_dim)
    k_gg = (permute_rope(wk, kv_heads) @ x_k).reshape(kv_heads, head_dim)
    group = heads // kv_heads
    for pos_q, pos_k in ((7, 3), (100, 0)):
        hf = [_rope_half(q_hf[h], pos_q) @ _rope_half(k_hf[h // group], pos_k) for h in range(heads)]
        gg = [_rope_interleaved(q_gg[h], pos_q) @ _rope_interleaved(k_gg[h // group], pos_k) for h in range(heads)]
        np.testing.assert_allclose(gg, hf, rtol=1e-10)
    # Without the permutation the scores differ: the check can fail.
    plain = [_rope_interleaved(q_hf[h], 7) @ _rope_interleaved(k_hf[h // group], 3) for h in range(heads)]
    assert not np.allclose(plain, [_rope_half(q_hf[h], 7) @ _rope_half(k_hf[h // group], 3) for h in range(heads)])
