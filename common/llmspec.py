"""What a language-model job sends: the API, streaming or not, and the prompt and output lengths in tokens, each
drawn per request from a distribution and made exact by the model's own tokenizer (follower/loadgen/llmprompts.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from common.loadspec import StrictModel

MAX_TOKENS = 131_072


class TokenLengths(StrictModel):
    """A length in tokens per request: `fixed` (mean), `uniform` (min..max), `normal` (mean, std) or `lognormal`
    (mean, sigma of its log); every draw is rounded and clipped to [min, max]. A number is short for fixed."""

    dist: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    mean: Annotated[int, Field(ge=1, le=MAX_TOKENS)] = 64
    min: Annotated[int, Field(ge=1, le=MAX_TOKENS)] = 1
    max: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | None = None  # None: the mean if fixed, else 4 x mean (uniform: needed)
    std: Annotated[float, Field(ge=0)] = 0.0
    sigma: Annotated[float, Field(ge=0, le=4)] = 0.5

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, data: Any) -> Any:
        return {"dist": "fixed", "mean": data} if isinstance(data, int) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _bounds(self) -> TokenLengths:
        if self.dist == "uniform" and self.max is None:
            raise ValueError("uniform needs max (and min)")
        if self.max is not None and self.max < self.min:
            raise ValueError("max must be >= min")
        return self

    @property
    def upper(self) -> int:
        """The longest draw: `max`, else the mean itself for a fixed length and 4 x mean for the others."""
        if self.max is not None:
            return self.max
        return max(self.min, self.mean if self.dist == "fixed" else 4 * self.mean)

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` lengths (int64), within [min, upper]."""
        if self.dist == "fixed":
            values = np.full(n, float(self.mean))
        elif self.dist == "uniform":
            values = rng.integers(self.min, self.upper + 1, size=n).astype(np.float64)
        elif self.dist == "normal":
            values = rng.normal(self.mean, self.std, size=n)
        else:
            # The lognormal whose mean is `mean`: mu = ln(mean) - sigma^2 / 2.
            values = rng.lognormal(np.log(self.mean) - self.sigma**2 / 2, self.sigma, size=n)
        return np.clip(np.rint(values), self.min, self.upper).astype(np.int64)


class LlmWorkload(StrictModel):
    """The requests of a language-model job (model format hf, an LLM backend)."""

    api: Literal["completions", "chat"] = "completions"
    stream: bool = True
    prompt_tokens: TokenLengths = TokenLengths(mean=128)
    output_tokens: TokenLengths = TokenLengths(mean=64)
    # Random weights never stop on their own terms and real ones stop early: either way the asked length is enforced
    # (vLLM: ignore_eos and min_tokens) and checked against the server's count.
    ignore_eos: bool = True

    @model_validator(mode="after")
    def _fits(self) -> LlmWorkload:
        if self.prompt_tokens.upper + self.output_tokens.upper > MAX_TOKENS:
            raise ValueError(f"the longest prompt plus the longest output exceed {MAX_TOKENS} tokens")
        return self
