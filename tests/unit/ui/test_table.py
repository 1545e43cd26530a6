"""The fixed-width table (ui/table.py): it reads exactly like rich's SIMPLE_HEAD table it replaces, and fits."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest
from rich import box
from rich.console import Console, RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from fellows_fsm.ui.table import Cell, Column, FixedTable, fit

COLUMNS = (Column("dispatch"), Column("name", max_width=24), Column("state"), Column("job"), Column("updated"))
ROWS: list[tuple[str, str, tuple[str, str], str, str]] = [
    ("0123456789ab", "train", ("RUNNING(high-eur)", "bold green"), "1001", "11-30 23:37"),
    ("0123456789ac", "a-name-much-longer-than-twenty-four", ("RESUBMITTED(normal-eur)", "cyan"), "1002", "23:37:24"),
    ("0123456789ad", "x", ("HANDED_OFF(gcp)", "bold green"), "-", ""),
]


def _rich_reference(rows: Sequence[Sequence[Cell]]) -> Table:
    """The rich table `status` drew before the fixed-width one: SIMPLE_HEAD, one-line cells, name up to 24."""
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    for column in COLUMNS:
        if column.max_width is None:
            table.add_column(column.header, no_wrap=True)
        else:
            table.add_column(column.header, overflow="ellipsis", no_wrap=True, max_width=column.max_width)
    for row in rows:
        table.add_row(*(cell if isinstance(cell, str) else Text(cell[0], style=cell[1]) for cell in row))
    return table


def _text(renderable: RenderableType, width: int) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(renderable)
    out = console.file.getvalue()
    assert isinstance(out, str)
    return out


@pytest.mark.parametrize("width", [200, 100, 80, 60], ids=["wide", "fits", "80-shrinks", "60-shrinks"])
def test_it_reads_like_the_rich_table_it_replaces(width: int) -> None:
    """Character for character the same as rich's SIMPLE_HEAD table, wide or shrunk to the console's width."""
    assert _text(FixedTable(COLUMNS, ROWS), width) == _text(_rich_reference(ROWS), width)


def test_a_name_past_its_max_width_ends_in_an_ellipsis() -> None:
    """The name column stops at 24 cells and ends a longer name with '…', keeping the other columns whole."""
    out = _text(FixedTable(COLUMNS, ROWS), 200)
    assert "a-name-much-longer-than…" in out
    assert "RESUBMITTED(normal-eur)" in out


@pytest.mark.parametrize("width", [80, 50, 40, 30], ids=["80", "50", "40", "30"])
def test_every_line_fits_the_console(width: int) -> None:
    """However narrow the console, no line of the table is wider than it."""
    lines = _text(FixedTable(COLUMNS, ROWS), width).splitlines()
    assert len(lines) == len(ROWS) + 4
    assert max(len(line) for line in lines) <= width


def test_a_styled_cell_keeps_its_style_and_the_header_is_bold() -> None:
    """On a terminal the state cell is drawn in its own style, the plain cells in none, the header bold."""
    console = Console(file=io.StringIO(), width=120, force_terminal=True, color_system="standard")
    segments = list(console.render(FixedTable(COLUMNS, ROWS)))
    styles = {seg.text.strip(): seg.style for seg in segments if seg.text.strip()}
    assert styles["RUNNING(high-eur)"] == Style.parse("bold green")
    assert styles["RESUBMITTED(normal-eur)"] == Style.parse("cyan")
    assert styles["dispatch"] is not None
    assert styles["dispatch"].bold


@pytest.mark.parametrize(
    ("text", "width", "expected"),
    [("train", 8, "train   "), ("train-123", 6, "train…"), ("日本語のジョブ", 7, "日本語…"), ("abc", 0, "")],
    ids=["padded", "cut", "wide-characters", "no-room"],
)
def test_fit_pads_or_cuts_to_the_width_in_cells(text: str, width: int, expected: str) -> None:
    """A cell is padded with spaces, or cut with '…', to exactly its width in terminal cells."""
    assert fit(text, width) == expected


def test_an_empty_table_is_its_header() -> None:
    """With no rows the table is the blank line, the header, the rule and the blank line."""
    out = _text(FixedTable(COLUMNS, []), 200)
    assert out == _text(_rich_reference([]), 200)
