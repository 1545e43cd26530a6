"""docs/design.md names only code that exists: every `file.py`: `Name` reference resolves to a definition there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
REFERENCE = re.compile(r"`((?:[a-z_]+/)*[a-z_]+\.py)`: `([A-Za-z_][A-Za-z0-9_.]*)`")


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines (functions, classes, assignments), each with its node."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:  # a name, or a tuple of names (never the names inside ``a.b = ...``)
                for name in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(name, ast.Name):
                        names.setdefault(name.id, node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def _resolves(path: str, name: str) -> bool:
    file = (
        ROOT / path if path.startswith(("tests/", "benchmarks/", "scripts/")) else ROOT / "src" / "fellows_fsm" / path
    )
    if not file.is_file():
        return False
    scope: ast.AST = ast.parse(file.read_text(encoding="utf-8"))
    for part in name.split("."):
        body = getattr(scope, "body", None)
        found = _defined(body) if isinstance(body, list) else {}
        if part not in found:
            return False
        scope = found[part]
    return True


def references() -> list[tuple[str, str]]:
    """Every `file.py`: `Name` pair of docs/design.md, in order."""
    return REFERENCE.findall(DESIGN.read_text(encoding="utf-8"))


def test_design_doc_names_only_code_that_exists() -> None:
    """Each reference names a file of the project and a function, class, method or constant defined in it."""
    pairs = references()
    assert len(pairs) > 30  # the map is made of them: a regex that found none would check nothing
    broken = [f"{path}: {name}" for path, name in pairs if not _resolves(path, name)]
    assert broken == []


def test_a_wrong_reference_is_caught() -> None:
    """The check itself: a name that is not there, in a file that is, does not resolve; one that is, does."""
    assert _resolves("driver/executor.py", "Executor.tick")
    assert not _resolves("driver/executor.py", "Executor.no_such_method")
    assert not _resolves("no_such_file.py", "Executor")
