"""The canonical LLM: a small Llama-architecture decoder with seeded random weights and a byte-level BPE tokenizer
trained on the spot, written as a Hugging Face model directory (config, safetensors weights, tokenizer) and zipped
into a bundle. Nothing is downloaded; the same seed gives the same bytes. With a score head it is a reranker instead.

Random weights make real compute and real token streams: a server runs every layer for every token. They make no
sense, so requests set `ignore_eos` (or `min_tokens`) to get the output length they ask for.

The tokenizer's vocabulary holds WORDS (below) as single tokens, each with the byte-level space marker: a prompt of
N of them, space-separated, is exactly N tokens after the beginning-of-sequence token (common/llmprompts.py).
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import asdict, dataclass

import numpy as np

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
# Syllables the training text is made of; their pairs and triples become the vocabulary's words.
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "vo",
    "si",
    "be",
    "do",
    "fa",
    "gu",
    "hi",
    "ja",
    "ko",
    "le",
    "mu",
    "no",
    "pe",
    "ri",
    "sa",
    "te",
    "vi",
    "wo",
    "xe",
    "yo",
    "zu",
    "ba",
    "ce",
    "di",
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
# The model's head: the next token's logits (a language model), or one relevance score per sequence (a reranker: a
# cross-encoder scoring a query and a document given as the tokenizer's pair, as vLLM's /rerank serves it).
HEADS = {"lm": "LlamaForCausalLM", "score": "LlamaForSequenceClassification"}


@dataclass(frozen=True)
class LlamaSpec:
    """A canonical LLM's shape. The defaults serve on 2 CPU cores in vLLM's CPU build in seconds per request."""

    layers: int = 4
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 4
    intermediate: int = 512
    vocab: int = 4096
    context: int = 2048
    seed: int = 0
    head: str = "lm"  # "lm": a language model (LlamaForCausalLM); "score": a reranker (one relevance score)

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}")
        if min(self.layers, self.hidden, self.heads, self.kv_heads, self.intermediate) < 1:
            raise ValueError("layers, hidden, heads, kv_heads and intermediate must all be >= 1")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must be a multiple of heads, and heads a multiple of kv_heads")
        if not 512 <= self.vocab <= 65_536:
            raise ValueError("vocab must be in [512, 65536]")
        if not 128 <= self.context <= 131_072:
            raise ValueError("context must be in [128, 131072]")

    @property
    def name(self) -> str:
        """The repository name a generated model gets by default."""
        suffix = "-score" if self.head == "score" else ""
        return f"llama-l{self.layers}-h{self.hidden}-v{self.vocab}-s{self.seed}{suffix}"

    @property
    def architecture(self) -> str:
        return HEADS[self.head]


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    """Seeded training text: words of two or three syllables, with a Zipf-like spread of frequencies."""
    rng = np.random.default_rng(seed)
    n = len(_SYLLABLES)
    words = ["".join(_SYLLABLES[j] for j in rng.integers(0, n, size=rng.integers(2, 4))) for _ in range(6000)]
    weights = 1.0 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    return [" ".join(rng.choice(words, size=12, p=weights)) for _ in range(lines)]


def train_tokenizer(spec: LlamaSpec) -> str:
    """A byte-level BPE tokenizer of `spec.vocab` tokens trained on the seeded corpus, as tokenizer.json text; it
    adds the beginning-of-sequence token in front of every encoded text, as Llama's does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab,
        special_tokens=[UNK, BOS, EOS, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    return tokenizer.to_str()


def config(spec: LlamaSpec, vocab: int, bos_id: int, eos_id: int) -> dict[str, object]:
    """The Hugging Face config.json of the model."""
    labels = {"num_labels": 1} if spec.head == "score" else {}
    return labels | {
        "architectures": [spec.architecture],
        "model_type": "llama",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.hidden // spec.heads,
        "hidden_act": "silu",
        "max_position_embeddings": spec.context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "attention_bias": False,
        "mlp_bias": False,
    }


def weights(spec: LlamaSpec, vocab: int) -> dict[str, np.ndarray]:
    """Seeded random weights under Llama's tensor names (N(0, 0.02), norms at 1), float16."""
    rng = np.random.default_rng(spec.seed + 1)
    head_dim = spec.hidden // spec.heads
    q, kv = spec.heads * head_dim, spec.kv_heads * head_dim

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    out = {"model.embed_tokens.weight": normal(vocab, spec.hidden)}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        out |= {
            p + "self_attn.q_proj.weight": normal(q, spec.hidden),
            p + "self_attn.k_proj.weight": normal(kv, spec.hidden),
            p + "self_attn.v_proj.weight": normal(kv, spec.hidden),
            p + "self_attn.o_proj.weight": normal(spec.hidden, q),
            p + "mlp.gate_proj.weight": normal(spec.intermediate, spec.hidden),
            p + "mlp.up_proj.weight": normal(spec.intermediate, spec.hidden),
            p + "mlp.down_proj.weight": normal(spec.hidden, spec.intermediate),
            p + "input_layernorm.weight": np.ones(spec.hidden, dtype=np.float16),
            p + "post_attention_layernorm.weight": np.ones(spec.hidden, dtype=np.float16),
        }
    out["model.norm.weight"] = np.ones(spec.hidden, dtype=np.float16)
    if spec.head == "score":
        out["score.weight"] = normal(1, spec.hidden)
    else:
        out["lm_head.weight"] = normal(vocab, spec.hidden)
    return out


def generate(spec: LlamaSpec) -> tuple[bytes, dict[str, object]]:
    """The model directory zipped (its files at the archive's root) and what was generated."""
    from safetensors.numpy import save

    tokenizer_json = train_tokenizer(spec)
    vocab = json.loads(tokenizer_json)["model"]["vocab"]
    size = max(vocab.values()) + 1
    cfg = config(spec, size, vocab[BOS], vocab[EOS])
    tensors = weights(spec, size)
    files = {
        "config.json": json.dumps(cfg, indent=1),
        "generation_config.json": json.dumps({"bos_token_id": vocab[BOS], "eos_token_id": vocab[EOS]}),
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": EOS,
                "unk_token": UNK,
                "model_max_length": spec.context,
                "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False,
            }
        ),
        "special_tokens_map.json": json.dumps({"bos_token": BOS, "eos_token": EOS, "unk_token": UNK}),
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, text in files.items():
            archive.writestr(_entry(name), text)
        archive.writestr(_entry("model.safetensors"), save(tensors, metadata={"format": "pt"}))
    params = int(sum(t.size for t in tensors.values()))
    return buffer.getvalue(), {"spec": asdict(spec), "vocab_size": size, "parameters": params}


def _entry(name: str) -> zipfile.ZipInfo:
    """A zip entry with a fixed time, so the same spec gives the same bytes."""
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = 0o644 << 16
    return info
