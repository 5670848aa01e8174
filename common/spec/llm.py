"""What a language-model job sends: the API, streaming or not, and the prompt and output lengths in tokens, each
drawn per request from a distribution and made exact by the model's own tokenizer (follower/loadgen/llmprompts.py);
or prompts from an uploaded prompt set (common.formats.llmdata); and a shared prefix for a share of the requests.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from common.base import StrictModel

MAX_TOKENS = 131_072
MAX_EMPIRICAL = 100_000  # lengths an empirical distribution may list inline


class TokenLengths(StrictModel):
    """A length in tokens per request: `fixed` (mean), `uniform` (min..max), `normal` (mean, std), `lognormal`
    (mean, sigma of its log) or `empirical` (drawn from `values`, observed lengths; a file of them is an uploaded
    prompt set of {"prompt_tokens": N} lines, llm.dataset); every draw is rounded and clipped to [min, max]. A number
    is short for fixed."""

    dist: Literal["fixed", "uniform", "normal", "lognormal", "empirical"] = "fixed"
    """The distribution of lengths."""
    mean: Annotated[int, Field(ge=1, le=MAX_TOKENS)] = 64
    """The mean length (fixed: the length)."""
    min: Annotated[int, Field(ge=1, le=MAX_TOKENS)] = 1
    """The shortest length drawn."""
    max: Annotated[int, Field(ge=1, le=MAX_TOKENS)] | None = None
    """The longest length drawn; unset: the mean for fixed, else 4 x the mean (uniform needs it)."""
    std: Annotated[float, Field(ge=0)] = 0.0
    """normal: the standard deviation."""
    sigma: Annotated[float, Field(ge=0, le=4)] = 0.5
    """lognormal: the standard deviation of the length's logarithm."""
    values: Annotated[list[Annotated[int, Field(ge=1, le=MAX_TOKENS)]], Field(max_length=MAX_EMPIRICAL)] | None = None
    """empirical: the observed lengths drawn from."""

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, data: Any) -> Any:
        return {"dist": "fixed", "mean": data} if isinstance(data, int) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _bounds(self) -> TokenLengths:
        if self.dist == "uniform" and self.max is None:
            raise ValueError("uniform needs max (and min)")
        if (self.dist == "empirical") != bool(self.values):
            raise ValueError("empirical needs values (the observed lengths), and only empirical takes them")
        if self.max is not None and self.max < self.min:
            raise ValueError("max must be >= min")
        return self

    @property
    def upper(self) -> int:
        """The longest draw: `max`, else the mean itself for a fixed length and 4 x mean for the others."""
        if self.max is not None:
            return self.max
        if self.values:
            return max(self.min, max(self.values))
        return max(self.min, self.mean if self.dist == "fixed" else 4 * self.mean)

    @property
    def expected(self) -> float:
        """The mean of the draws, near enough to size a run by (clipping aside)."""
        if self.dist == "uniform":
            return (self.min + self.upper) / 2
        if self.values:
            return float(np.mean(self.values))
        return float(min(max(self.mean, self.min), self.upper))

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` lengths (int64), within [min, upper]."""
        if self.dist == "fixed":
            values = np.full(n, float(self.mean))
        elif self.dist == "uniform":
            values = rng.integers(self.min, self.upper + 1, size=n).astype(np.float64)
        elif self.values:
            values = rng.choice(np.asarray(self.values, dtype=np.float64), size=n)
        elif self.dist == "normal":
            values = rng.normal(self.mean, self.std, size=n)
        else:
            # The lognormal whose mean is `mean`: mu = ln(mean) - sigma^2 / 2.
            values = rng.lognormal(np.log(self.mean) - self.sigma**2 / 2, self.sigma, size=n)
        return np.clip(np.rint(values), self.min, self.upper).astype(np.int64)


class SharedPrefix(StrictModel):
    """A system prompt of `tokens` tokens that a `share` of the requests start with (one of `count` such prefixes,
    each request's drawn at random): what prefix caching saves. A request's prompt is its prefix plus its own
    prompt_tokens (or prompt set row)."""

    tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS)]
    """The prefix's length in tokens."""
    share: Annotated[float, Field(gt=0, le=1)] = 1.0
    """The share of requests that start with a prefix."""
    count: Annotated[int, Field(ge=1, le=1000)] = 1
    """How many different prefixes there are (each request's drawn at random)."""


MAX_SESSION_TURNS = 64
MAX_EMBED_INPUTS = 2048  # texts one embeddings request may carry
MAX_IMAGES = 16  # images one request may carry
MAX_IMAGE_SIDE = 4096
MAX_FAN_OUT = 16
MAX_THINK_S = 600.0


class ThinkTime(StrictModel):
    """A pause in seconds, drawn per turn: `fixed` (mean), `uniform` (min..max), `exponential` (mean) or `lognormal`
    (mean, sigma of its log), clipped to [min, max]. A number is short for fixed."""

    dist: Literal["fixed", "uniform", "exponential", "lognormal"] = "fixed"
    """The distribution of pauses."""
    mean: Annotated[float, Field(ge=0, le=MAX_THINK_S)] = 1.0
    """The mean pause in seconds (fixed: the pause)."""
    min: Annotated[float, Field(ge=0, le=MAX_THINK_S)] = 0.0
    """The shortest pause."""
    max: Annotated[float, Field(ge=0, le=MAX_THINK_S)] | None = None
    """The longest pause; unset: 4 x the mean (uniform needs it)."""
    sigma: Annotated[float, Field(ge=0, le=4)] = 0.5
    """lognormal: the standard deviation of the pause's logarithm."""

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, data: Any) -> Any:
        return {"dist": "fixed", "mean": data} if isinstance(data, int | float) and not isinstance(data, bool) else data

    @model_validator(mode="after")
    def _bounds(self) -> ThinkTime:
        if self.dist == "uniform" and self.max is None:
            raise ValueError("uniform needs max (and min)")
        if self.max is not None and self.max < self.min:
            raise ValueError("max must be >= min")
        return self

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """`n` pauses in ns (int64), within [min, max]."""
        upper = self.max if self.max is not None else max(self.min, 4 * self.mean)
        if self.dist == "fixed":
            values = np.full(n, self.mean)
        elif self.dist == "uniform":
            values = rng.uniform(self.min, upper, size=n)
        elif self.dist == "exponential":
            values = rng.exponential(self.mean, size=n) if self.mean > 0 else np.zeros(n)
        else:
            values = rng.lognormal(np.log(max(self.mean, 1e-9)) - self.sigma**2 / 2, self.sigma, size=n)
        return np.rint(np.clip(values, self.min, upper) * 1e9).astype(np.int64)


class ImageInputs(StrictModel):
    """Images in each request's last user message, for a vision model: `count` distinct PNG images of `width` x
    `height` pixels each (random pixels from the point's seed: no two requests send the same image, so no cache of
    the server's finds one), in the API's own content parts."""

    count: Annotated[int, Field(ge=1, le=MAX_IMAGES)] = 1
    """Images per request."""
    width: Annotated[int, Field(ge=8, le=MAX_IMAGE_SIDE)] = 224
    """Each image's width in pixels."""
    height: Annotated[int, Field(ge=8, le=MAX_IMAGE_SIDE)] = 224
    """Each image's height in pixels."""


class FanOut(StrictModel):
    """Sub-agents: a `share` of a session's later turns are `width` requests issued together (each the session's
    context and a sub-task of its own), the next turn waiting for all of them and carrying all their answers."""

    share: Annotated[float, Field(gt=0, le=1)] = 0.25
    """The share of turns (after the first) that fan out."""
    width: Annotated[int, Field(ge=2, le=MAX_FAN_OUT)] = 3
    """The requests a fanned-out turn issues together."""


class Sessions(StrictModel):
    """Multi-turn sessions (agentic or chat): sessions arrive open loop at the load's rate (sessions per second;
    Poisson, constant, gamma, or a trace's offsets) and run their turns one after the other. A turn's prompt is the
    session's context so far, the previous turn's answer (replayed as text of the length it was asked, which
    ignore_eos makes the length generated) and `user_tokens` of a new user or tool message, so the context grows
    each turn; the first turn's prompt is `prompt_tokens` long. The next turn is due `think_s` after the last answer
    arrived (the user's or tool's time); it is sent then however late that is, and its latency counts from then."""

    turns: TokenLengths = TokenLengths(mean=8)
    """Turns per session (a count, drawn like a length: fixed, uniform, normal, lognormal or empirical)."""
    user_tokens: TokenLengths = TokenLengths(mean=32)
    """Each later turn's new message, in tokens."""
    think_s: ThinkTime = ThinkTime()
    """The pause between an answer and the session's next turn, in seconds."""
    fan_out: FanOut | None = None
    """Sub-agent turns issued together (the next turn waits for all)."""
    from_trace: bool = False
    """Replay the sessions of the load's trace (load.pattern trace, an uploaded session trace: Mooncake lines with
    session_id): each session arrives at its timestamp, and its turns' lengths and the pauses between them are the
    trace's (so turns, user_tokens, think_s and fan_out are left out)."""

    @model_validator(mode="after")
    def _turns(self) -> Sessions:
        if self.turns.upper > MAX_SESSION_TURNS:
            raise ValueError(f"turns: at most {MAX_SESSION_TURNS} per session")
        # (compared with the defaults, not the fields set: a stored spec names every field)
        drawn = sorted(
            k for k in ("turns", "user_tokens", "think_s", "fan_out") if getattr(self, k) != Sessions.model_fields[k].default
        )
        if self.from_trace and drawn:
            raise ValueError(
                f"from_trace: the trace gives each session's turns, lengths and pauses: leave out {', '.join(drawn)}"
            )
        return self


# The APIs a server benchfleet starts serves, beyond OpenAI's completions and chat completions. (llama.cpp's Messages
# API drops its message_start event, and with it the prompt's count, when the first token is part of a character.)
OTHER_APIS_SERVED = {"vllm": ("messages", "responses", "embeddings", "rerank"), "llamacpp": ("responses", "embeddings")}


def apis_served(backend: str) -> tuple[str, ...]:
    """The APIs `backend` (a language-model server benchfleet starts) serves."""
    return ("completions", "chat", *OTHER_APIS_SERVED.get(backend, ()))


def api_refused_by(api: str, backends: list[str], llm_backends: frozenset[str]) -> str | None:
    """The first of the job's language-model servers that does not serve `api`, or None."""
    return next((b for b in backends if b in llm_backends and api not in apis_served(b)), None)


# Servers that put their usage (cumulative completion tokens) in every streamed event when asked with
# stream_options.continuous_usage_stats.
USAGE_PER_EVENT_SERVERS = frozenset({"vllm", "sglang"})


class LlmWorkload(StrictModel):
    """The requests of a language-model job (model format hf, an LLM backend)."""

    api: Literal["completions", "chat", "messages", "responses", "embeddings", "rerank"] = "completions"
    """The API: OpenAI's completions, or chat completions, Anthropic's Messages (/v1/messages, streamed as its
    events), OpenAI's Responses (/v1/responses), embeddings (/v1/embeddings: `inputs_per_request` texts of
    prompt_tokens each per request, answered whole; vLLM is started as a pooling model for it, llama.cpp with
    --embeddings), or rerank (/v1/rerank, as Cohere, Jina and vLLM serve it: a query and `inputs_per_request`
    documents, each prompt_tokens long, scored); the model's chat template applies to chat, messages and responses."""
    inputs_per_request: Annotated[int, Field(ge=1, le=MAX_EMBED_INPUTS)] = 1
    """embeddings: the texts each request embeds; rerank: the documents each request scores (items per second count
    them)."""
    images: ImageInputs | None = None
    """Images in each request's user message (chat, messages or responses), for a vision model. The server counts
    their tokens by its own processor: a constant count per request is kept as the point's prompt_rendering_tokens."""
    stream: bool = True
    """Stream the answer (server-sent events): needed for time to first token and inter-token latency."""
    prompt_tokens: TokenLengths = TokenLengths(mean=128)
    """Prompt lengths in tokens."""
    output_tokens: TokenLengths = TokenLengths(mean=64)
    """Output lengths in tokens: what each request asks the server to generate."""
    ignore_eos: bool = True
    """Generate exactly the asked length (vLLM: ignore_eos and min_tokens): random weights never stop on their own
    terms and real ones stop early; the server's count is checked against it."""
    dataset: Annotated[str, Field(pattern=r"^[A-Za-z0-9]{1,64}$")] | None = None
    """An uploaded prompt set (format prompts, its id): each request takes a row (a prompt, chat, conversation turn or
    length), at random or in order; a row without output_tokens draws it from `output_tokens`."""
    order: Literal["random", "sequential"] = "random"
    """How a prompt set's rows are taken: at random or in order."""
    shared_prefix: SharedPrefix | None = None
    """A system prompt a share of the requests start with (what prefix caching saves)."""
    sessions: Sessions | None = None
    """Multi-turn sessions whose context grows turn by turn, with think time between turns and optional sub-agent
    fan-out (the load's rate is then sessions per second)."""
    usage_per_event: bool | None = None
    """Ask the server for its token count in every streamed event (`stream_options.continuous_usage_stats`), so an event
    carrying several tokens counts as that many token arrivals at its time. Default: on for the servers known to take
    it (vLLM, SGLang), off for the others and for a target (a server that does not know the option may refuse it)."""

    def asks_usage_per_event(self, backend: str) -> bool:
        """Whether the requests to `backend` ask for a token count in every event (`usage_per_event`, or its default)."""
        return self.usage_per_event if self.usage_per_event is not None else backend in USAGE_PER_EVENT_SERVERS

    @property
    def pooled(self) -> bool:
        """Whether nothing is generated: texts are embedded or scored (embeddings, rerank), answered whole."""
        return self.api in ("embeddings", "rerank")

    @property
    def server_renders(self) -> bool:
        """Whether the server counts the prompt by a rendering the client cannot repeat exactly: images (its own
        processor's tokens) or the Messages and Responses APIs' conversion of their input to the chat template. Chat
        and completions are counted as the client renders them, exactly."""
        return self.images is not None or self.api in ("messages", "responses")

    @property
    def templated(self) -> bool:
        """Whether the prompt is chat messages the model's chat template renders (chat, messages and responses)."""
        return self.api in ("chat", "messages", "responses")

    @model_validator(mode="after")
    def _fits(self) -> LlmWorkload:
        if self.pooled and (self.sessions is not None or self.shared_prefix is not None or self.dataset):
            raise ValueError(f"api {self.api} sends drawn texts: not with sessions, shared_prefix or dataset")
        if self.images is not None and (not self.templated or self.sessions is not None):
            raise ValueError("images go in a chat message: they need api chat, messages or responses, and no sessions")
        if self.inputs_per_request > 1 and not self.pooled:
            raise ValueError("inputs_per_request is the texts of an embeddings or rerank request: it needs one of those apis")
        if self.api == "messages" and self.ignore_eos:
            raise ValueError(
                "api messages: Anthropic's Messages API cannot be asked for an exact length; set ignore_eos: false "
                "(an answer may then end early, and the server's count is the one used)"
            )
        if self.sessions is not None and (self.dataset is not None or self.shared_prefix is not None):
            raise ValueError("sessions build their own growing prompts: leave out dataset and shared_prefix")
        if self.longest_prompt + self.output_tokens.upper > MAX_TOKENS:
            raise ValueError(f"the longest prompt plus the longest output exceed {MAX_TOKENS} tokens")
        return self

    @property
    def longest_prompt(self) -> int:
        """The longest prompt drawn from prompt_tokens, with its shared prefix (a prompt set's rows are measured on the
        follower); a session's last turn, with every answer and message before it (a session trace's are bounded at its
        upload and measured on the follower)."""
        first = self.prompt_tokens.upper + (self.shared_prefix.tokens if self.shared_prefix else 0)
        if self.sessions is None or self.sessions.from_trace:
            return first
        width = self.sessions.fan_out.width if self.sessions.fan_out else 1
        per_turn = width * self.output_tokens.upper + self.sessions.user_tokens.upper
        return first + (self.sessions.turns.upper - 1) * per_turn
