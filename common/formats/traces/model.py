"""A parsed trace and what every trace format's reader shares: the entry checks (offsets finite, in range and never
decreasing; either every entry gives a field or none does) and the bounds."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from common.spec.load import MAX_DURATION_S

# One trace feeds one run; a million arrivals is ~3 min at 5k req/s, far more than one point ever sends.
MAX_TRACE_FILE_ENTRIES = 1_000_000
MAX_TRACE_TOKENS = 131_072
MAX_TRACE_LINE_CHARS = 65_536  # one entry: a send offset, its request's lengths and its prefix blocks
MAX_SESSION_ID_CHARS = 256
MAX_BLOCK_ID = 2**53 - 1  # a prefix block's id (Mooncake's hash_ids): a whole number JSON carries exactly


class BadTrace(ValueError):
    """The bytes are not a trace file (the message names the line and what is wrong)."""


Blocks = tuple[tuple[int, ...], ...]  # each entry's prefix block ids, in order


@dataclass(frozen=True)
class Trace:
    """A parsed trace: send offsets (int64 ns, non-decreasing) and, optionally, the request-data row of each, a
    language model's prompt and output tokens of each, and the ids of the prefix blocks each prompt starts with (two
    entries whose ids agree up to block k share their prompts' first k blocks exactly)."""

    offsets_ns: np.ndarray
    inputs: np.ndarray | None = None
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    blocks: Blocks | None = None
    # A session trace: each entry's session (0, 1, ... in order of arrival; a session's entries together, its turns in
    # order, each at its session's offset) and the pause before it after the answer before it (0 for a first turn).
    session_of: np.ndarray | None = None
    delay_ns: np.ndarray | None = None

    @property
    def fields(self) -> list[str]:
        """What each entry gives, for the data set's metadata."""
        named = ["input"] if self.inputs is not None else []
        named += ["output_tokens", "prompt_tokens"] if self.prompt_tokens is not None else []
        named += ["hash_ids"] if self.blocks is not None else []
        named += ["session_id"] if self.session_of is not None else []
        return sorted([*named, "t"])

    @property
    def sessions(self) -> int:
        """The sessions a session trace holds (0 for any other trace)."""
        return int(self.session_of[-1]) + 1 if self.session_of is not None and len(self.session_of) else 0

    def __len__(self) -> int:
        return len(self.offsets_ns)

    @property
    def span_s(self) -> float:
        """The last offset in seconds (0 for an empty trace)."""
        return float(self.offsets_ns[-1]) / 1e9 if len(self.offsets_ns) else 0.0

    @property
    def max_input(self) -> int | None:
        """The largest request-data row the trace names, if it names any."""
        return int(self.inputs.max()) if self.inputs is not None and len(self.inputs) else None

    def within(self, duration_s: float) -> Trace:
        """The entries whose offset lies in [0, duration_s): what a run of that length replays."""
        end_ns = int(round(duration_s * 1e9))
        keep = int(np.searchsorted(self.offsets_ns, end_ns, side="left"))

        def cut(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[:keep]

        blocks = self.blocks[:keep] if self.blocks is not None else None
        return Trace(
            self.offsets_ns[:keep],
            cut(self.inputs),
            cut(self.prompt_tokens),
            cut(self.output_tokens),
            blocks,
            cut(self.session_of),
            cut(self.delay_ns),
        )

    def then(self, later: Trace, shift_ns: int) -> Trace:
        """This trace followed by `later`, its offsets moved by `shift_ns` (a field either lacks is dropped)."""

        def cat(first: np.ndarray | None, rest: np.ndarray | None) -> np.ndarray | None:
            return None if first is None or rest is None else np.concatenate([first, rest])

        blocks = self.blocks + later.blocks if self.blocks is not None and later.blocks is not None else None
        later_sessions = None if later.session_of is None else later.session_of + self.sessions  # numbered on
        return Trace(
            np.concatenate([self.offsets_ns, later.offsets_ns + shift_ns]),
            cat(self.inputs, later.inputs),
            cat(self.prompt_tokens, later.prompt_tokens),
            cat(self.output_tokens, later.output_tokens),
            blocks,
            cat(self.session_of, later_sessions),
            cat(self.delay_ns, later.delay_ns),
        )


def json_object(line: str, where: str, holding: str) -> dict[str, object]:
    """A JSON line's object, or BadTrace naming the line: not JSON, or not an object with `holding`."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadTrace(f"{where} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadTrace(f"{where} must be an object with {holding}")
    return doc


def number(text: str, where: str, column: str) -> float:
    """A CSV cell as a number, or BadTrace naming the line and the column."""
    try:
        return float(text)
    except ValueError:
        raise BadTrace(f"{where}: {column} {text.strip()[:40]!r} is not a number") from None


def whole(value: object, where: str, column: str = "input", least: int = 0, most: int | None = None) -> int:
    """A whole number in [least, most] (a JSON number, or a CSV cell's text), or BadTrace naming the line and column."""
    bound = f"in {least}..{most}" if most is not None else f">= {least}"
    if isinstance(value, bool):
        raise BadTrace(f"{where}: {column} must be a whole number {bound}, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            raise BadTrace(f"{where}: {column} must be a whole number {bound}, got {text[:40]!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < least or (most is not None and value > most):
        raise BadTrace(f"{where}: {column} must be a whole number {bound}, got {value!r}")
    return value


def tokens(value: object, where: str, column: str) -> int:
    """A request's length in tokens (1..MAX_TRACE_TOKENS)."""
    return whole(value, where, column, 1, MAX_TRACE_TOKENS)


class Builder:
    """Collects entries and checks them as they come (a field given by one entry must be given by all)."""

    def __init__(self, empty: str) -> None:
        self.empty = empty  # what the format expects, said when the file has no entry
        self.seconds: list[float] = []
        self.inputs: list[int] = []
        self.lengths: list[tuple[int, int]] = []
        self.blocks: list[tuple[int, ...]] = []
        self.turns: list[tuple[int, int]] = []  # a session trace's (session, delay_ns) per entry
        self.given: dict[str, bool] = {}

    def _same(self, field: str, has: bool, where: str, said: str) -> None:
        if self.given.setdefault(field, has) != has:
            raise BadTrace(f"{where}: either every entry {said} or none does")

    def add(
        self,
        t: float,
        input_index: int | None,
        where: str,
        lengths: tuple[int, int] | None = None,
        blocks: tuple[int, ...] | None = None,
        turn: tuple[int, int] | None = None,
    ) -> None:
        """An entry at `t` seconds; `turn` (its session, the pause before it in ns) where the trace holds sessions, whose
        entries are added session by session, each at its session's offset."""
        if not math.isfinite(t) or t < 0:
            raise BadTrace(f"{where}: offset {t!r} must be a finite number of seconds >= 0")
        if t > MAX_DURATION_S:
            raise BadTrace(f"{where}: offset {t:g} s is beyond the longest run ({MAX_DURATION_S:g} s)")
        if self.seconds and t < self.seconds[-1]:
            raise BadTrace(
                f"{where}: offset {t:g} s is earlier than the one before ({self.seconds[-1]:g} s); offsets must never decrease"
            )
        self._same("input", input_index is not None, where, "names an input")
        self._same("lengths", lengths is not None, where, "gives prompt_tokens and output_tokens")
        self._same("blocks", blocks is not None, where, "gives hash_ids")
        self._same("session", turn is not None, where, "gives a session_id")
        if len(self.seconds) >= MAX_TRACE_FILE_ENTRIES:
            raise BadTrace(f"more than {MAX_TRACE_FILE_ENTRIES} entries")
        self.seconds.append(t)
        if input_index is not None:
            self.inputs.append(input_index)
        if lengths is not None:
            self.lengths.append(lengths)
        if blocks is not None:
            self.blocks.append(blocks)
        if turn is not None:
            self.turns.append(turn)

    def build(self) -> Trace:
        if not self.seconds:
            raise BadTrace(f"no entries ({self.empty})")
        offsets = np.round(np.asarray(self.seconds, dtype=np.float64) * 1e9).astype(np.int64)
        inputs = np.asarray(self.inputs, dtype=np.int64) if self.given.get("input") else None
        blocks = tuple(self.blocks) if self.given.get("blocks") else None
        turns = np.asarray(self.turns, dtype=np.int64).reshape(-1, 2) if self.given.get("session") else None
        session_of, delay_ns = (turns[:, 0].copy(), turns[:, 1].copy()) if turns is not None else (None, None)
        if not self.given.get("lengths"):
            return Trace(offsets, inputs, blocks=blocks, session_of=session_of, delay_ns=delay_ns)
        lengths = np.asarray(self.lengths, dtype=np.int64)
        return Trace(offsets, inputs, lengths[:, 0].copy(), lengths[:, 1].copy(), blocks, session_of, delay_ns)
