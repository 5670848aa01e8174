"""Uploaded text files read a line at a time, each line bounded: a file of one 200 MiB line is refused at the bound,
having held no more than it in memory (JSONL request data, prompt sets and traces are checked on the leader at upload
and read again on the follower)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO

# The longest line of JSONL request data or of a prompt set: one sample's inputs, or one conversation, in 16 Mi
# characters (a 1 Mi-value tensor as JSON numbers, or a 128k-token prompt many times over).
MAX_LINE_CHARS = 16 * 2**20


class LineTooLong(ValueError):
    """A line past the bound (the message names it and the bound)."""


def bounded_lines(
    text: IO[str], limit: int = MAX_LINE_CHARS, bad: Callable[[str], Exception] = LineTooLong
) -> Iterator[tuple[int, str]]:
    """(number from 1, line) for each line of `text`; `bad(message)` raised at the first line longer than `limit`
    characters (its end of line not counted), having read at most `limit` + 1 characters of it, or at bytes that are
    not UTF-8."""
    number = 0
    while True:
        try:
            line = text.readline(limit + 1)
        except UnicodeDecodeError as exc:
            raise bad(f"not UTF-8 text: {exc}") from None
        if not line:
            return
        number += 1
        if len(line) > limit and not line.endswith("\n"):
            raise bad(f"line {number} is longer than {limit:,} characters")
        yield number, line
