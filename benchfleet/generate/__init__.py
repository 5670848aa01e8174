"""The canonical models the CLI generates: a tensor model (ONNX + TorchScript bundle) or a language model (hf)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast


@dataclass(frozen=True)
class Generated:
    """A generated model: its bytes, its default repository name, its format and a line describing it."""

    data: bytes
    name: str
    format: str
    summary: str


def canonical(kind: str, *, depth: int, width: int, input_size: int, seed: int) -> Generated:
    """A canonical tensor model, checked against PyTorch (needs the torch extra); ValueError for a bad shape or kind."""
    from follower.convert.canonical import CanonicalSpec, Kind, default_name, generate  # torch loads only here

    spec = CanonicalSpec(cast(Kind, kind), depth=depth, width=width, input_size=input_size, seed=seed)
    bundle, meta = generate(spec)
    cost = meta["cost_per_inference"]
    checks = ", ".join(f"{c['target']} max|diff| {c['max_abs_diff']:.2g} (atol {c['atol']:g})" for c in meta["checks"])
    return Generated(
        bundle, default_name(spec), "bundle", f"{cost['flops']} FLOPs, {cost['bytes']} bytes per inference; checks: {checks}"
    )


def llama(
    *,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int | None,
    intermediate: int | None,
    vocab: int,
    context: int,
    seed: int,
    head: str = "lm",
) -> Generated:
    """The canonical language model; ValueError for a shape that cannot be a Llama."""
    from benchfleet.generate.llmgen import LlamaSpec, generate

    spec = LlamaSpec(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads or heads,
        intermediate=intermediate or 2 * hidden,
        vocab=vocab,
        context=context,
        seed=seed,
        head=head,
    )
    bundle, meta = generate(spec)
    summary = f"{spec.architecture}, {meta['parameters']} parameters, vocabulary {meta['vocab_size']}, context {context}"
    return Generated(bundle, spec.name, "hf", summary)
