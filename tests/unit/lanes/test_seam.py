"""The lane seam is capability: outside a kind's own folder (lanes/<kind>/), no code asks which kind a lane is,
neither by ``isinstance`` on one of the kind's classes nor by comparing a ``kind`` with a kind's name."""

from __future__ import annotations

import ast
from pathlib import Path

from fellows_fsm.lanes import registry

SRC = Path(__file__).resolve().parents[3] / "src" / "fellows_fsm"
LANES = SRC / "lanes"


def _kind_folders() -> list[Path]:
    return [p for p in LANES.iterdir() if p.is_dir() and (p / "__init__.py").exists()]


def _kind_classes() -> set[str]:
    """Every class a kind's folder defines."""
    return {
        node.name
        for folder in _kind_folders()
        for path in folder.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }


def _names(node: ast.expr) -> list[str]:
    """The class names an isinstance's second argument gives (a name, a dotted name, a tuple, an ``A | B``)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _names(elt)]
    if isinstance(node, ast.BinOp):
        return _names(node.left) + _names(node.right)
    return []


def _is_kind(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
        isinstance(node, ast.Name) and node.id == "kind"
    )


def kind_checks(source: str, classes: set[str], kinds: set[str]) -> list[str]:
    """Each ``isinstance(x, <a kind's class>)`` and ``<...>.kind == "<a kind's name>"`` of ``source``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"isinstance", "issubclass"}
        ):
            hit = [n for n in _names(node.args[1]) if n in classes] if len(node.args) == 2 else []
            found += [f"line {node.lineno}: {node.func.id}(..., {n})" for n in hit]
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            words = {s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)}
            if any(_is_kind(s) for s in sides) and words & kinds:
                found.append(f"line {node.lineno}: kind compared with {sorted(words & kinds)}")
    return found


def test_the_finder_finds_a_kind_check_and_passes_a_capability() -> None:
    """The rule's finder sees an isinstance on a kind's class and a ``kind ==`` on a kind's name, and passes a
    capability asked (``lane.follows``) and a ``kind`` that is no lane's."""
    bad = "isinstance(lane, (int, GcpBatchSettings))\nif lane.kind == 'command':\n    pass\n"
    assert len(kind_checks(bad, {"GcpBatchSettings"}, {"command"})) == 2
    good = "if lane.follows and owner.kind != 'background':\n    isinstance(lane, PaidLane)\n"
    assert kind_checks(good, {"GcpBatchSettings"}, {"command"}) == []


def test_no_code_outside_a_kinds_folder_asks_which_kind_a_lane_is() -> None:
    """No module outside lanes/<kind>/ does ``isinstance`` on a kind's class or compares a ``kind`` with a kind's
    name: it asks the lane what it can do (lanes/base.py)."""
    folders = _kind_folders()
    assert {f.name for f in folders} >= {"slurm", "command", "gcp_batch"}
    classes, kinds = _kind_classes(), set(registry.KINDS)
    outside = [p for p in SRC.rglob("*.py") if not any(p.is_relative_to(f) for f in folders)]
    found = [
        f"{p.relative_to(SRC)} {hit}"
        for p in outside
        for hit in kind_checks(p.read_text(encoding="utf-8"), classes, kinds)
    ]
    assert found == []
