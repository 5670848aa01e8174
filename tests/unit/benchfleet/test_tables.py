"""Sheets stay readable: every value whole off a terminal, columns chosen by width on one, reasons as numbered notes."""

from __future__ import annotations

import io

from rich.console import Console

from benchfleet.tables import Col, Sheet, fit, print_sheet

LONG = "a-very-long-model-name-that-would-be-cut:17"


def _sheet() -> Sheet:
    sheet = Sheet(title="t", columns=[Col("#"), Col("model", right=False), Col("p99"), Col("p90", rank=2),
                                      Col("max", rank=3), Col("cost", rank=1), Col("valid", right=False)])  # fmt: skip
    for i in range(3):
        verdict = "yes" if i == 0 else "NO " + sheet.note("the server fell behind: achieved 80% of the offered rate")
        sheet.rows.append([str(i), LONG, f"{10 + i:.2f}", "9.00", "123456.78", "0.0042", verdict])
    return sheet


def _terminal(width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=True, color_system=None), out


def test_off_a_terminal_every_column_is_whole_whatever_the_width() -> None:
    out = io.StringIO()
    print_sheet(Console(file=out, width=40), _sheet())  # a pipe: rich guesses 80, here 40
    text = out.getvalue()
    assert "…" not in text and text.count(LONG) == 3 and "123456.78" in text
    header = next(line for line in text.splitlines() if "model" in line)
    assert all(name in header for name in ("#", "model", "p99", "p90", "max", "cost", "valid")), header
    assert "not shown" not in text


def test_a_narrow_terminal_shows_the_columns_that_fit_and_names_the_rest() -> None:
    console, out = _terminal(80)
    print_sheet(console, _sheet())
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), [len(line) for line in lines]
    assert "…" not in out.getvalue() and out.getvalue().count(LONG) == 3
    header = next(line for line in lines if "model" in line)
    # Rank 0 always; the highest ranks leave first.
    assert all(name in header for name in ("#", "model", "p99", "valid")) and "max" not in header
    assert any(line.startswith("not shown at this width: ") and "max" in line for line in lines), lines
    wide_console, wide_out = _terminal(80)
    print_sheet(wide_console, _sheet(), wide=True)
    assert "max" in next(line for line in wide_out.getvalue().splitlines() if "model" in line)


def test_fit_leaves_out_the_highest_rank_first_and_never_rank_0() -> None:
    sheet = _sheet()
    assert fit(sheet, None) == list(range(7))
    everything = fit(sheet, 10_000)
    assert everything == list(range(7))
    tight = fit(sheet, 60)
    assert {0, 1, 2, 6} <= set(tight) and 4 not in tight  # max (rank 3) goes before p90 (2) and cost (1)
    assert fit(sheet, 5) == [0, 1, 2, 6]  # too narrow for anything else: rank 0 stays


def test_reasons_are_numbered_notes_under_the_table() -> None:
    out = io.StringIO()
    sheet = _sheet()
    print_sheet(Console(file=out), sheet)
    text = out.getvalue()
    assert sheet.notes == ["the server fell behind: achieved 80% of the offered rate"]  # the same text, one note
    assert text.count("NO [1]") == 2 and "1. the server fell behind" in text
    assert text.count("the server fell behind") == 1
