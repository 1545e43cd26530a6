"""Where a state is written: only the journal writes one, and only as a journaled step (``Journal.write``), never by
an UPDATE of its own; a dispatch's row is inserted once, before its first step."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).parents[3] / "src" / "fellows_fsm"
STATE_SQL = re.compile(
    r"UPDATE\s+(dispatches|handoffs)\b|INSERT\s+(OR\s+REPLACE\s+)?INTO\s+(transitions|handoffs)\b", re.I
)
"""A statement that can write a dispatch's state or its lane command's (a step, a handoffs row)."""


def _sql_by_function(path: Path) -> dict[str, list[str]]:
    """The SQL strings of a module that can write a state, by the function they are in ('' for module level)."""
    found: dict[str, list[str]] = {}

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef) else function
            if isinstance(child, ast.Constant) and isinstance(child.value, str) and STATE_SQL.search(child.value):
                found.setdefault(function, []).append(child.value)
            visit(child, name)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_no_module_outside_the_journal_writes_a_state_in_sql() -> None:
    """No module outside journal/ holds an UPDATE of dispatches or handoffs, or an INSERT of a step or a handoff."""
    writers = sorted(
        str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if p.parent.name != "journal" and _sql_by_function(p)
    )
    assert writers == []


def test_the_journal_writes_a_state_only_as_a_step() -> None:
    """In journal/, only Journal.write (and the command's handoffs row it writes with a step) updates a dispatch
    or a handoff, or inserts a step; the schema's migrations (rewrites of old journals) aside."""
    by_function = {
        (p.name, function)
        for p in (SRC / "journal").glob("*.py")
        for function in _sql_by_function(p)
        if p.name != "schema.py"
    }
    assert by_function == {("store.py", "write"), ("store.py", "_write_command"), ("store.py", "set_handoff_pid")}
    (pid,) = _sql_by_function(SRC / "journal" / "store.py")["set_handoff_pid"]
    assert pid == "UPDATE handoffs SET pid=? WHERE dispatch_id=?"  # the command's process group: a fact, no state
