"""A table of one-line cells drawn like rich's ``box.SIMPLE_HEAD`` table, row by row, at a small part of its cost.

rich's Table measures and wraps every cell, about half a millisecond a row: ``status --all`` on 10,000 dispatches
spent seconds there. Here a cell is one line of text, so a column is as wide as its longest cell (up to its
``max_width``), and each row becomes one line. Wider than the console, the columns shrink evenly (as rich's do)
and a cut cell ends in ``…``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import attrs
from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style

__all__ = ["Cell", "Column", "FixedTable", "fit"]

Cell = str | tuple[str, str]
"""A cell's text, or its text and the rich style it is drawn in."""


@attrs.frozen
class Column:
    """A column's header, and the most cells it shows of a longer text (cut with ``…``), if any."""

    header: str
    max_width: int | None = None


def _width(text: str) -> int:
    """The cells ``text`` takes on a terminal (ASCII: its length, without rich's per-character lookup)."""
    return len(text) if text.isascii() else cell_len(text)


def fit(text: str, width: int) -> str:
    """``text`` padded with spaces to ``width`` cells, or cut to ``width`` with ``…`` as its last cell."""
    size = _width(text)
    if size <= width:
        return text + " " * (width - size)
    if width <= 0:
        return ""
    if text.isascii():
        return text[: width - 1] + "…"
    return set_cell_size(text, width - 1) + "…"


def _shrink_evenly(widths: Sequence[int], excess: int) -> list[int]:
    """Take ``excess`` cells off ``widths``, spread evenly over the columns (rich's last resort, the same rounding)."""
    left = len(widths)
    shrunk = []
    for width in widths:
        cut = min(width, round(excess / left))
        shrunk.append(width - cut)
        excess -= cut
        left -= 1
    return shrunk


class FixedTable:
    """Rows of one-line cells under a bold header and a rule, two spaces from the edge, three between columns."""

    def __init__(self, columns: Sequence[Column], rows: Iterable[Sequence[Cell]]) -> None:
        self.columns = tuple(columns)
        self.rows = [tuple(row) for row in rows]
        natural = [_width(c.header) for c in self.columns]
        for row in self.rows:
            for i, cell in enumerate(row):
                size = _width(cell if isinstance(cell, str) else cell[0])
                natural[i] = max(natural[i], size)
        self.natural = [
            w if c.max_width is None else min(w, c.max_width) for w, c in zip(natural, self.columns, strict=True)
        ]

    def widths(self, max_width: int) -> list[int]:
        """Each column's width within ``max_width``, its padding (a space each side) included; 0 hides a column."""
        padded = [w + 2 for w in self.natural]
        room = max_width - (len(padded) + 1)
        if sum(padded) > room:
            padded = _shrink_evenly(padded, sum(padded) - room)
        return padded

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as its natural widths, within the console."""
        width = sum(self.natural) + 3 * len(self.natural) + 1
        return Measurement(width, width).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """A blank line, the header, a rule, one line per row, a blank line: rich's SIMPLE_HEAD layout."""
        widths = self.widths(options.max_width)
        total = sum(widths) + len(widths) + 1
        new_line = Segment.line()
        yield Segment(" " * total)
        yield new_line
        yield Segment(" ")
        header = console.get_style("table.header")
        for i, (column, width) in enumerate(zip(self.columns, widths, strict=True)):
            yield from _cell(column.header, width, header, first=i == 0)
        yield Segment(" ")
        yield new_line
        yield Segment(" " + "─" * (total - 2) + " ")
        yield new_line
        for row in self.rows:
            # Plain cells are joined into one segment: a segment costs far more than a character.
            plain = " "
            for i, (cell, width) in enumerate(zip(row, widths, strict=True)):
                gap = " " if i else ""
                if isinstance(cell, str):
                    plain += gap + _pad(cell, width)
                    continue
                text, style = cell
                yield Segment(plain + gap + (" " if width else ""))
                yield Segment(fit(text, width - 2), console.get_style(style))
                plain = " " if width > 1 else ""
            yield Segment(plain + " ")
            yield new_line
        yield Segment(" " * total)
        yield new_line


def _pad(text: str, width: int) -> str:
    """A cell of ``width`` cells: a space, the text fitted, a space (only spaces when there is no room for text)."""
    return " " + fit(text, width - 2) + " " if width >= 2 else " " * width


def _cell(text: str, width: int, style: Style, *, first: bool) -> Iterator[Segment]:
    """A styled cell as segments: the divider before it (unless it is the first), its padding, its text styled."""
    if not first:
        yield Segment(" ")
    yield Segment(" " if width else "")
    yield Segment(fit(text, width - 2), style)
    yield Segment(" " if width > 1 else "")
