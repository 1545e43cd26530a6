"""A table of one-line cells drawn like rich's ``box.SIMPLE_HEAD`` table, row by row, at a small part of its cost.

rich's Table measures and wraps every cell, about half a millisecond a row: ``status --all`` on 10,000 dispatches
spent seconds there. Here a cell is one line of text, so a column is as wide as its longest cell (up to its
``max_width``), and each row becomes one line. Wider than the console, the columns shrink evenly (as rich's do)
and a cut cell ends in ``…``.

A column may say how it behaves on a narrow console (80 columns: tmux, a laptop): ``min_width`` is the least it
shrinks to (``None``: never cut, as a dispatch id, which a user copies); ``drop`` hides it whole (header too) when
the others cannot fit otherwise, the highest first (a column that repeats what another says); ``below`` moves its
text under the row, wrapped over the width and never cut, once the console cannot give it ``min_width`` (a reason).
So no id is cut, no column is left zero cells wide, and no reason text is lost.
"""

from __future__ import annotations

import textwrap
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
    """A column's header, the most cells it shows of a longer text (cut with ``…``), if any, and how it gives way
    on a narrow console (the module's docstring): ``min_width``, ``drop`` and ``below``."""

    header: str
    max_width: int | None = None
    min_width: int | None = 0
    drop: int = 0
    below: bool = False
    labelled: bool = False
    """Under the row, its text follows its header (``parks in: 4m 10s``), where a bare value would say nothing."""


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


def _shrink_above(widths: Sequence[int], floors: Sequence[int], excess: int) -> list[int]:
    """Take ``excess`` cells off ``widths``, evenly over the columns that are above their floor, none below it."""
    shrunk = list(widths)
    while excess > 0:
        able = [i for i, (w, f) in enumerate(zip(shrunk, floors, strict=True)) if w > f]
        if not able:
            break
        share = max(excess // len(able), 1)
        for i in able:
            cut = min(share, shrunk[i] - floors[i], excess)
            shrunk[i] -= cut
            excess -= cut
    return shrunk


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

    def __init__(
        self,
        columns: Sequence[Column],
        rows: Iterable[Sequence[Cell]],
        *,
        title: str | None = None,
        caption: str | None = None,
    ) -> None:
        self.title = title
        self.caption = caption
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
        """Each column's width within ``max_width``, its padding (a space each side) included; 0 hides a column
        (one dropped, or one whose text goes below the row)."""
        shown = [True] * len(self.columns)
        while True:
            padded = [w + 2 if on else 0 for w, on in zip(self.natural, shown, strict=True)]
            room = max_width - (sum(shown) + 1)
            if sum(padded) <= room:
                return padded
            floors = [self._floor(i) + 2 if on and self.columns[i].min_width != 0 else 0 for i, on in enumerate(shown)]
            if not any(floors):  # no column says how it gives way: rich's even shrink, as before
                return _shrink_evenly(padded, sum(padded) - room)
            if sum(floors) <= room:
                return _shrink_above(padded, floors, sum(padded) - room)
            below = [i for i, on in enumerate(shown) if on and self.columns[i].below and not self.columns[i].drop]
            droppable = [i for i, on in enumerate(shown) if on and self.columns[i].drop]
            if below:  # a reason goes under its row first; then, highest ``drop`` first, hidden or moved under
                shown[below[0]] = False
            elif droppable:
                shown[max(droppable, key=lambda i: self.columns[i].drop)] = False
            else:
                return floors  # wider than the console: its lines wrap, but nothing is cut past its floor

    def _floor(self, i: int) -> int:
        """The least width column ``i`` shrinks to (its natural width when it is never cut)."""
        column = self.columns[i]
        if column.below:
            return min(max(column.min_width or 0, _width(column.header)), self.natural[i])
        if column.min_width is None:
            return self.natural[i]
        return min(max(column.min_width, _width(column.header)), self.natural[i])  # a header is never cut either

    def _row(
        self, console: Console, cells: Sequence[Cell], keep: Sequence[int], widths: Sequence[int], inline: int | None
    ) -> Iterator[Segment]:
        """One row's line (and, when its ``below`` column wraps within its width, the lines that go on with it)."""
        more: list[str] = []
        row = list(cells)
        if inline is not None:
            text, style = _text_style(row[keep[inline]])
            lines = _wrap(text, widths[inline] - 2) or [""]
            row[keep[inline]] = (lines[0], style) if style else lines[0]
            offset = 1 + sum(widths[:inline]) + inline + 1
            more = [" " * offset + line for line in lines[1:]]
        # Plain cells are joined into one segment: a segment costs far more than a character.
        plain = " "
        for n, i in enumerate(keep):
            cell, width = row[i], widths[n]
            gap = " " if n else ""
            if isinstance(cell, str):
                plain += gap + _pad(cell, width)
                continue
            text, style = cell
            yield Segment(plain + gap + (" " if width else ""))
            yield Segment(fit(text, width - 2), console.get_style(style))
            plain = " " if width > 1 else ""
        yield Segment(plain + " ")
        yield Segment.line()
        for line in more:
            yield Segment(line)
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        """As wide as its natural widths, within the console."""
        width = sum(self.natural) + 3 * len(self.natural) + 1
        return Measurement(width, width).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """A blank line, the header, a rule, one line per row, a blank line: rich's SIMPLE_HEAD layout. A column
        whose text goes below (``below``) is drawn as indented lines under its row, wrapped, never cut."""
        all_widths = self.widths(options.max_width)
        keep = [
            i for i, (w, c) in enumerate(zip(all_widths, self.columns, strict=True)) if w or not (c.drop or c.below)
        ]
        under = [i for i, (w, c) in enumerate(zip(all_widths, self.columns, strict=True)) if not w and c.below]
        widths = [all_widths[i] for i in keep]
        total = sum(widths) + len(widths) + 1
        new_line = Segment.line()
        for line in _wrap(self.title or "", options.max_width):  # wrapped, never cut
            yield Segment(line)
            yield new_line
        yield Segment(" " * total)
        yield new_line
        yield Segment(" ")
        header = console.get_style("table.header")
        for n, i in enumerate(keep):
            yield from _cell(self.columns[i].header, widths[n], header, first=n == 0)
        yield Segment(" ")
        yield new_line
        yield Segment(" " + "─" * (total - 2) + " ")
        yield new_line
        wrap_at = max(options.max_width - 6, 20)
        inline = [n for n, i in enumerate(keep) if self.columns[i].below]  # a below column that fits: wrapped in it
        for row in self.rows:
            yield from self._row(console, row, keep, widths, inline[0] if inline else None)
            for i in under:
                text, style = _text_style(row[i])
                if text and self.columns[i].labelled:
                    text = f"{self.columns[i].header}: {text}"
                for line in _wrap(text, wrap_at):
                    yield Segment("    ")
                    yield Segment(line, console.get_style(style) if style else None)
                    yield new_line
        if self.caption:
            for line in _wrap(self.caption, options.max_width):
                yield Segment(line, console.get_style("table.caption"))
                yield new_line
            return
        yield Segment(" " * total)
        yield new_line


def _text_style(cell: Cell) -> tuple[str, str | None]:
    return (cell, None) if isinstance(cell, str) else cell


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, every word kept (a word longer than a line is split)."""
    return textwrap.wrap(text, max(width, 1), break_long_words=True, break_on_hyphens=False)


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
