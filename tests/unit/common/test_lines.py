"""Uploaded text is read a line at a time, each line bounded (common/formats/lines.py): the attack run's 200 MiB
single-line JSONL was accepted with an 823 MB peak; a line past the bound is now refused, naming it, having held no more
than the bound in memory."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import pytest

from common.formats.datasets import BadData, inspect_data, load_samples
from common.formats.lines import MAX_LINE_CHARS, LineTooLong, bounded_lines
from common.formats.traces import MAX_TRACE_LINE_CHARS, BadTrace, parse_trace


def test_lines_up_to_the_bound_are_read_and_the_first_past_it_is_named() -> None:
    text = io.StringIO("ab\n" + "x" * 5 + "\n" + "y" * 5 + "\n" + "z" * 6 + "\nnever read\n")
    lines = bounded_lines(text, limit=5)
    assert next(lines) == (1, "ab\n")
    assert next(lines) == (2, "xxxxx\n")
    assert next(lines) == (3, "yyyyy\n")
    with pytest.raises(LineTooLong, match=r"^line 4 is longer than 5 characters$"):
        next(lines)
    assert list(bounded_lines(io.StringIO("abcde"), limit=5)) == [(1, "abcde")]  # the last line, without its newline
    with pytest.raises(LineTooLong, match="line 1 is longer than 5"):
        list(bounded_lines(io.StringIO("abcdef"), limit=5))


@pytest.fixture(scope="module")
def one_long_line(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 64 MiB JSONL file of one line: one sample of four times the bound, valid JSON had it been read whole."""
    path = tmp_path_factory.mktemp("long") / "one-line.jsonl"
    count = 32 * 2**20  # "0," per value: 64 MiB
    with open(path, "wb") as fh:
        fh.write(b'{"x": [')
        fh.write(b"0," * (count - 1))
        fh.write(b'0], "prompt": "p", "t": 0}\n')
    return path


@pytest.mark.parametrize("data_format", ["jsonl", "prompts"])
def test_a_line_past_the_bound_is_refused_at_upload_without_holding_the_file(one_long_line: Path, data_format: str) -> None:
    tracemalloc.start()
    try:
        with open(one_long_line, "rb") as fp, pytest.raises(BadData) as refused:
            inspect_data(fp, data_format)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(refused.value) == f"line 1 is longer than {MAX_LINE_CHARS:,} characters"
    # The bound's characters (one byte each here) and the reader's buffers: not the file's 64 MiB, nor its values.
    assert peak < 2 * MAX_LINE_CHARS + 2**20, f"peak {peak:,} bytes"


def test_the_follower_reads_a_stored_jsonl_with_the_same_bound(one_long_line: Path) -> None:
    with pytest.raises(LineTooLong, match=f"line 1 is longer than {MAX_LINE_CHARS:,} characters"):
        load_samples(str(one_long_line), "jsonl")


def test_a_trace_line_past_its_bound_is_refused(one_long_line: Path) -> None:
    with open(one_long_line, "rb") as fp, pytest.raises(BadTrace) as refused:
        parse_trace(fp)
    assert str(refused.value) == f"line 1 is longer than {MAX_TRACE_LINE_CHARS:,} characters"
    # Short lines still parse, whichever form (JSONL here), comments and blanks skipped.
    trace = parse_trace(io.BytesIO(b'# offsets\n{"t": 0.5}\n\n{"t": 1.0}\n'))
    assert len(trace) == 2 and trace.span_s == 1.0
