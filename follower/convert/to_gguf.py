"""A Hugging Face Llama model directory as one GGUF file, the format llama.cpp serves.

What it reads is what the leader accepted (common/formats/hfbundle.py): config.json, safetensors weights and a
tokenizer.json, nothing executable. It does what llama.cpp's own convert_hf_to_gguf.py does for LlamaForCausalLM:

- the hyperparameters under llama.cpp's keys (context, widths, heads, RMS-norm epsilon, RoPE base);
- a byte-level BPE tokenizer as llama.cpp's "gpt2" vocabulary: every token in id order, its type (normal, control
  for special added tokens, user-defined for other added ones), the merges, BOS/EOS/UNK and whether BOS is added,
  and the chat template;
- the tensors under llama.cpp's names, the query and key projections' rows permuted from Hugging Face's rotate-half
  RoPE layout to GGML's interleaved pairs, one-dimensional tensors (norms) in float32 and the rest in the asked type:
  float32, float16, bfloat16, or a quantised type, Q8_0 (8-bit, a scale per block of 32) or Q4_0 (4-bit), as
  llama-quantize writes them; a matrix whose rows are not whole blocks stays float16, as llama.cpp's converter keeps it.

Anything else (another architecture, another tokenizer, a tensor it does not know) is a ValueError naming it: a model
is converted exactly or not at all. The file is written beside its destination and renamed into place.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

ARCHITECTURES = frozenset({"LlamaForCausalLM"})
DTYPES = ("float16", "float32", "bfloat16", "q8_0", "q4_0")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
_PER_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GLOBAL = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_SKIPPED = re.compile(r"\.rotary_emb\.inv_freq$")  # recomputed by every runtime; some exports keep it

# llama.cpp's token types (gguf.TokenType)
NORMAL, UNUSED, CONTROL, USER_DEFINED = 1, 5, 3, 4


def permute_rope(weight: np.ndarray, heads: int) -> np.ndarray:
    """A query or key projection's rows from rotate-half order (first half of each head, then second) to interleaved
    pairs, as llama.cpp's converter permutes them (`heads`: the projection's heads, the KV heads for the key)."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _config(model_dir: Path) -> dict[str, Any]:
    config = json.loads((model_dir / "config.json").read_text())
    archs = set(config.get("architectures") or [])
    if not archs & ARCHITECTURES:
        known = ", ".join(sorted(ARCHITECTURES))
        raise ValueError(f"llama.cpp conversion handles {known}; this model is {sorted(archs) or 'unnamed'}")
    return config


def _tensors(model_dir: Path) -> Iterator[tuple[str, np.ndarray]]:
    from safetensors.numpy import load_file

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError("the model directory holds no .safetensors weights")
    for path in files:
        yield from load_file(path).items()


def gguf_name(name: str) -> str | None:
    """The llama.cpp name of a Hugging Face Llama tensor; None for one every runtime recomputes; ValueError if unknown."""
    if _SKIPPED.search(name):
        return None
    if name in _GLOBAL:
        return _GLOBAL[name]
    match = _LAYER.match(name)
    if match and match.group(2) in _PER_LAYER:
        return f"blk.{match.group(1)}.{_PER_LAYER[match.group(2)]}"
    raise ValueError(f"tensor {name!r} is not part of a Llama model llama.cpp knows")


def vocabulary(model_dir: Path, vocab_size: int) -> dict[str, Any]:
    """The tokenizer as llama.cpp's gpt2 vocabulary: tokens and types in id order (holes as unused pads), merges, the
    special ids, whether BOS is added, the chat template."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise ValueError("llama.cpp conversion needs the tokenizer as tokenizer.json")
    tok = json.loads(path.read_text())
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or "ByteLevel" not in json.dumps(tok.get("pre_tokenizer")):
        raise ValueError("llama.cpp conversion handles byte-level BPE tokenizers; this tokenizer.json is not one")
    ids: dict[int, tuple[str, int]] = {i: (t, NORMAL) for t, i in model["vocab"].items()}
    for added in tok.get("added_tokens") or []:
        ids[added["id"]] = (added["content"], CONTROL if added.get("special") else USER_DEFINED)
    size = max(vocab_size, max(ids) + 1)
    tokens = [ids.get(i, (f"[PAD{i}]", UNUSED)) for i in range(size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    settings_path = model_dir / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text()) if settings_path.is_file() else {}
    by_text = {t: i for i, (t, _) in enumerate(tokens)}

    def special(key: str) -> int | None:
        value = settings.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        return by_text.get(value) if isinstance(value, str) else None

    bos = special("bos_token")
    single = ((tok.get("post_processor") or {}).get("single")) or []
    first = single[0].get("SpecialToken", {}).get("id") if single and isinstance(single[0], dict) else None
    add_bos = bool(settings.get("add_bos_token", bos is not None and first is not None and by_text.get(first) == bos))
    return {
        "tokens": [t for t, _ in tokens],
        "types": [k for _, k in tokens],
        "merges": merges,
        "bos": bos,
        "eos": special("eos_token"),
        "unk": special("unk_token"),
        "add_bos": add_bos,
        "chat_template": settings.get("chat_template") if isinstance(settings.get("chat_template"), str) else None,
    }


def convert(model_dir: Path, out: Path, *, dtype: str = "float16") -> Path:
    """Write `model_dir` (a Hugging Face Llama) as the GGUF file `out`, its matrices in `dtype`; returns `out`."""
    import gguf

    if dtype not in DTYPES:
        raise ValueError(f"server.llm.dtype for llama.cpp is one of {', '.join(DTYPES)}, not {dtype!r}")
    model_dir, out = Path(model_dir), Path(out)
    config = _config(model_dir)
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    hidden = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab = vocabulary(model_dir, int(config["vocab_size"]))
    file_type = {
        "float16": gguf.LlamaFileType.MOSTLY_F16,
        "float32": gguf.LlamaFileType.ALL_F32,
        "bfloat16": gguf.LlamaFileType.MOSTLY_BF16,
        "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
        "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    }[dtype]

    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    try:
        writer.add_name(model_dir.name)
        writer.add_context_length(int(config["max_position_embeddings"]))
        writer.add_embedding_length(hidden)
        writer.add_block_count(int(config["num_hidden_layers"]))
        writer.add_feed_forward_length(int(config["intermediate_size"]))
        writer.add_head_count(heads)
        writer.add_head_count_kv(kv_heads)
        writer.add_rope_dimension_count(head_dim)
        writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-5)))
        writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
        writer.add_file_type(file_type)
        writer.add_vocab_size(len(vocab["tokens"]))
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(vocab["tokens"])
        writer.add_token_types(vocab["types"])
        writer.add_token_merges(vocab["merges"])
        for key, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id), ("unk", writer.add_unk_token_id)):
            if vocab[key] is not None:
                add(vocab[key])
        writer.add_add_bos_token(vocab["add_bos"])
        writer.add_add_eos_token(False)
        if vocab["chat_template"]:
            writer.add_chat_template(vocab["chat_template"])
        for name, data in _tensors(model_dir):
            target = gguf_name(name)
            if target is None:
                continue
            if target.endswith("attn_q.weight"):
                data = permute_rope(data, heads)
            elif target.endswith("attn_k.weight"):
                data = permute_rope(data, kv_heads)
            _add(writer, target, data, dtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)  # never a half-written file beside the model
        raise
    writer.close()
    os.replace(partial, out)
    return out


def _add(writer: Any, name: str, data: np.ndarray, dtype: str) -> None:
    import gguf

    if data.ndim == 1 or dtype == "float32":
        writer.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
        return
    kind = {"bfloat16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0"}.get(dtype)
    qtype = getattr(gguf.GGMLQuantizationType, kind) if kind else None
    if qtype is None or data.shape[-1] % gguf.GGML_QUANT_SIZES[qtype][0]:
        writer.add_tensor(name, np.ascontiguousarray(data, dtype=np.float16))
        return
    packed = gguf.quants.quantize(np.ascontiguousarray(data, dtype=np.float32), qtype)
    writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=qtype)
