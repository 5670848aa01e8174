"""Tables that stay readable at any width: every value whole, columns chosen by width, reasons as numbered notes.

A table is a `Sheet`: columns with a rank (0: always shown; higher ranks are left out first when a terminal is too
narrow) and rows of text cells. Written to a terminal, the sheet shows the columns that fit its width, in rank order,
and says which it left out (`--wide` shows them all). Written to a file or a pipe, it shows every column at its full
width: a log keeps every value. Long texts (a point's invalid reasons) do not go in cells: they are numbered notes
under the table, and the cell holds the note's number.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Col:
    """One column: its header, alignment and rank (0: always shown; the highest rank is the first left out)."""

    name: str
    right: bool = True
    rank: int = 0


@dataclass
class Sheet:
    """A table of text cells with a title, numbered notes under it and a footer line."""

    columns: list[Col]
    title: str = ""
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    footer: str = ""

    def note(self, text: str) -> str:
        """The marker of a note under the table (the same text keeps its number)."""
        if text not in self.notes:
            self.notes.append(text)
        return f"[{self.notes.index(text) + 1}]"


# Each column costs its cells' width, one space of padding either side and one of separator (box.SIMPLE_HEAD draws
# no vertical rules: its separators and edges are spaces); the table one more for its edges.
_PADDING = 3


def _widths(sheet: Sheet) -> list[int]:
    return [max([len(c.name), *(len(row[i]) for row in sheet.rows)]) for i, c in enumerate(sheet.columns)]


def fit(sheet: Sheet, width: int | None) -> list[int]:
    """The indexes of the columns to show within `width` characters (None: all): columns leave one at a time, the
    highest rank first and, within a rank, the rightmost first; rank 0 always stays."""
    shown = list(range(len(sheet.columns)))
    if width is None:
        return shown
    widths = _widths(sheet)
    while sum(widths[i] + _PADDING for i in shown) + 1 > width:
        droppable = [i for i in shown if sheet.columns[i].rank > 0]
        if not droppable:
            break
        worst = max(sheet.columns[i].rank for i in droppable)
        shown.remove(max(i for i in droppable if sheet.columns[i].rank == worst))
    return shown


def print_sheet(console: Console, sheet: Sheet, *, wide: bool = False) -> None:
    """Print the sheet: on a terminal, the columns that fit (all with `wide`); elsewhere every column, uncut."""
    terminal = console.is_terminal
    shown = fit(sheet, console.width if terminal and not wide else None)
    table = Table(title=sheet.title or None, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i in shown:
        col = sheet.columns[i]
        # Never an ellipsis: a value too long for a narrow terminal folds onto the next line instead.
        table.add_column(col.name, justify="right" if col.right else "left", overflow="fold", no_wrap=not terminal)
    for row in sheet.rows:
        table.add_row(*(Text(row[i]) for i in shown))  # plain text: a "[...]" in a value is not markup
    if terminal:
        console.print(table)
    else:
        # As wide as the widest row needs, whatever width the console guessed (80 for a pipe), without the padding
        # rich adds at line ends: a log keeps every value and nothing else.
        needed = sum(w + _PADDING for i, w in enumerate(_widths(sheet)) if i in shown) + 1
        buffer = io.StringIO()
        Console(file=buffer, width=max(needed, len(sheet.title), 20), no_color=True, highlight=False).print(table)
        console.file.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))
    hidden = [sheet.columns[i].name for i in range(len(sheet.columns)) if i not in shown]
    lines = [f"{n}. {text}" for n, text in enumerate(sheet.notes, start=1)]
    if sheet.footer:
        lines.append(sheet.footer)
    if hidden:
        lines.append(f"not shown at this width: {', '.join(hidden)} (--wide shows every column, --json the data)")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=not terminal)
