"""A language-model run's per-request token records, beside the request records (follower/loadgen/records.py): when
each token event arrived (openai_stream.is_token_event), the text, and the server's own token counts. Records read
back from their blob (a load shard's, follower/point/shard.py) carry no text: the client's token count of it, made
where the text was, instead."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import orjson

from follower.protocols.transports.base import Stream

if TYPE_CHECKING:
    from follower.loadgen.llmprompts import PromptMaker


@dataclass
class LlmColumns:
    """One entry per scheduled request; -1 (or None) where the request had no such answer."""

    prompt_tokens: np.ndarray  # the server's count (usage)
    completion_tokens: np.ndarray  # the server's count (usage)
    events: np.ndarray  # data events received (with or without text)
    token_times: list[np.ndarray | None]  # arrival (monotonic ns) of each token event
    texts: list[bytes | None]  # the text, JSON-escaped as it came
    # The client tokenizer's count of each text where the text itself is not here (read back from a blob); -1 unknown.
    client_tokens: np.ndarray | None = None

    @classmethod
    def allocate(cls, n: int) -> LlmColumns:
        return cls(
            np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64), [None] * n, [None] * n
        )

    def client_count(self, i: int, maker: PromptMaker | None) -> int:
        """The client tokenizer's count of request i's text (-1: no text, or no tokenizer)."""
        text = self.text(i)
        if text is not None:
            return -1 if maker is None else maker.count_output(text)
        return -1 if self.client_tokens is None else int(self.client_tokens[i])

    def client_counts(self, maker: PromptMaker | None) -> np.ndarray:
        """Every request's client count (what a blob keeps in place of the texts)."""
        return np.array([self.client_count(i, maker) for i in range(len(self.events))], dtype=np.int64)

    def shifted(self, delta_ns: int) -> LlmColumns:
        """The same records with every arrival moved by `delta_ns` (onto another clock)."""
        times = [None if t is None else t + delta_ns for t in self.token_times]
        return dataclasses.replace(self, token_times=times)

    def add(self, i: int, stream: Stream) -> None:
        """Request i's stream (on the event loop, as its answer completes)."""
        self.prompt_tokens[i] = -1 if stream.prompt_tokens is None else stream.prompt_tokens
        self.completion_tokens[i] = -1 if stream.completion_tokens is None else stream.completion_tokens
        self.events[i] = stream.events
        self.token_times[i] = np.asarray(stream.events_ns, dtype=np.int64)
        self.texts[i] = stream.text

    def subset(self, mask: np.ndarray) -> LlmColumns:
        """The entries of the requests in `mask`."""
        where = np.flatnonzero(mask)
        return LlmColumns(
            self.prompt_tokens[mask],
            self.completion_tokens[mask],
            self.events[mask],
            [self.token_times[i] for i in where],
            [self.texts[i] for i in where],
            None if self.client_tokens is None else self.client_tokens[mask],
        )

    def token_events(self) -> int:
        """Data events received over every request: what the generator parsed."""
        return int(self.events.sum())

    def first_token_ns(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Each request's (of those from `lo` to `hi`) first token event (-1: none)."""
        times = self.token_times[lo:hi]
        return np.array([t[0] if t is not None and len(t) else -1 for t in times], dtype=np.int64)

    def last_token_ns(self) -> np.ndarray:
        """Each request's last token event (-1: none)."""
        return np.array([t[-1] if t is not None and len(t) else -1 for t in self.token_times], dtype=np.int64)

    def text(self, i: int) -> str | None:
        """Request i's text, unescaped (after the run: JSON decoding is kept off the hot path)."""
        raw = self.texts[i]
        if raw is None:
            return None
        try:
            return str(orjson.loads(b'"' + raw + b'"'))
        except orjson.JSONDecodeError:
            return None


def ttft_ns(first_ns: np.ndarray, intended_ns: np.ndarray) -> np.ndarray:
    """Time to first token, one definition for every figure (the point's, its windows', goodput's): from each request's
    intended send to its first token event, over the requests that have one (`first_ns` -1: none yet)."""
    has = first_ns >= 0
    return first_ns[has] - intended_ns[has]
