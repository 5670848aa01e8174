"""Trace files: the three spellings of the one format, and every refusal naming the line and the reason."""

from __future__ import annotations

import io

import numpy as np
import pytest

from common.formats.datasets import BadData, inspect_data
from common.formats.traces import BadTrace, Trace, parse_trace, trace_facts


def _parse(text: str | bytes) -> Trace:
    return parse_trace(io.BytesIO(text.encode() if isinstance(text, str) else text))


@pytest.mark.parametrize(
    ("text", "offsets_ns", "inputs"),
    [
        ("0\n0.0125\n# a comment\n\n0.5\n", [0, 12_500_000, 500_000_000], None),
        ("t\n0\n0.25\n0.25\n", [0, 250_000_000, 250_000_000], None),
        ("t_ms,input,user\n0,3,a\n1.5,0,b\n40,3,c\n", [0, 1_500_000, 40_000_000], [3, 0, 3]),
        ('{"t": 0.001}\n{"t": 0.002}\n', [1_000_000, 2_000_000], None),
        ('{"t_ms": 2, "input": 1}\n{"t_ms": 3, "input": 0}\n', [2_000_000, 3_000_000], [1, 0]),
        ("1e-3\n2E-3\n", [1_000_000, 2_000_000], None),
    ],
)
def test_each_spelling_parses_to_ns_offsets(text: str, offsets_ns: list[int], inputs: list[int] | None) -> None:
    trace = _parse(text)
    assert trace.offsets_ns.tolist() == offsets_ns
    assert (trace.inputs.tolist() if trace.inputs is not None else None) == inputs


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("0.2\n0.1\n", "line 2: offset 0.1 s is earlier"),
        ("-0.5\n", "line 1: offset -0.5 must be a finite number of seconds >= 0"),
        ("t\n0\nnan\n", "line 3: offset nan"),
        ("t\n0\nabc\n", "line 3: t 'abc' is not a number"),
        ("4000\n", "beyond the longest run"),
        ("time,input\n0,1\n", "no t (seconds) or t_ms"),
        ("t,t_ms\n0,0\n", "either t"),
        ("t,input\n0,1\n0.1,x\n", "line 3: input must be a whole number"),
        ("t,input\n0,-1\n", "input must be a whole number >= 0"),
        ('{"t": 0, "input": 1}\n{"t": 1}\n', "either every entry names an input or none does"),
        ('{"t": "soon"}\n', "t must be a number"),
        ('{"t": 0}\n[1]\n', "line 2 must be an object"),
        ("t\n0\n0,1\n", "line 3 has 2 columns"),
        ("# only a comment\n\n", "no entries"),
        (b"\xff\xfe0\n", "not UTF-8"),
    ],
)
def test_bad_traces_are_refused_naming_line_and_reason(text: str | bytes, needle: str) -> None:
    with pytest.raises(BadTrace) as caught:
        _parse(text)
    assert needle in str(caught.value)


def test_upload_check_reports_entries_fields_span_and_rows() -> None:
    fp = io.BytesIO(b"t,input\n0,2\n0.5,7\n1.25,0\n")
    assert inspect_data(fp, "trace") == (3, ["input", "t"])
    assert trace_facts(fp) == (1.25, 7)
    assert inspect_data(io.BytesIO(b"0\n1\n"), "trace") == (2, ["t"])
    with pytest.raises(BadData, match="earlier"):
        inspect_data(io.BytesIO(b"1\n0\n"), "trace")


def test_within_cuts_at_the_run_length_keeping_inputs_aligned() -> None:
    trace = Trace(np.array([0, 10, 20, 30], dtype=np.int64) * 1_000_000, np.array([5, 6, 7, 8]))
    cut = trace.within(0.025)
    assert cut.offsets_ns.tolist() == [0, 10_000_000, 20_000_000] and cut.inputs is not None
    assert cut.inputs.tolist() == [5, 6, 7]
    assert len(trace.within(0.0)) == 0 and trace.span_s == 0.03 and trace.max_input == 8


@pytest.mark.parametrize("text", [
    "t_ms,prompt_tokens,output_tokens\n0,100,20\n5,30,4\n",
    '{"t_ms": 0, "prompt_tokens": 100, "output_tokens": 20}\n{"t_ms": 5, "prompt_tokens": 30, "output_tokens": 4}\n',
])  # fmt: skip
def test_a_trace_may_give_each_requests_token_lengths(text: str) -> None:
    trace = _parse(text)
    assert trace.prompt_tokens is not None and trace.prompt_tokens.tolist() == [100, 30]
    assert trace.output_tokens is not None and trace.output_tokens.tolist() == [20, 4]
    assert trace.fields == ["output_tokens", "prompt_tokens", "t"]
    assert inspect_data(io.BytesIO(text.encode()), "trace") == (2, ["output_tokens", "prompt_tokens", "t"])
    assert trace.within(0.001).prompt_tokens is not None and trace.within(0.001).prompt_tokens.tolist() == [100]


@pytest.mark.parametrize(("text", "needle"), [
    ("t,prompt_tokens\n0,5\n", "line 2: give both prompt_tokens and output_tokens, or neither"),
    ("t,prompt_tokens,output_tokens\n0,5,0\n", "line 2: output_tokens must be a whole number in 1..131072"),
    ('{"t": 0, "prompt_tokens": 5, "output_tokens": 2}\n{"t": 1}\n', "line 2: either every entry gives prompt_tokens"),
])  # fmt: skip
def test_bad_token_lengths_in_a_trace_are_refused_naming_the_line(text: str, needle: str) -> None:
    with pytest.raises(BadTrace) as caught:
        _parse(text)
    assert needle in str(caught.value)
