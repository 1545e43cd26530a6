"""The package's shape: the embedding API loads no terminal libraries, and no module is over 500 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import fellows_fsm

SRC = Path(fellows_fsm.__file__).parent


@pytest.mark.parametrize("module", ["fellows_fsm", "fellows_fsm.api", "fellows_fsm.sim"])
def test_the_python_api_loads_neither_rich_nor_click(module: str) -> None:
    """``import fellows_fsm`` (a program embedding the API) imports no module of rich or click: those are the
    command line's. Run in a fresh interpreter, so no other test's imports count."""
    code = (
        f"import sys\nsys.path.insert(0, {str(SRC.parent)!r})\nimport {module}\n"  # this checkout's package
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'click'))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "", f"import {module} loaded: {result.stdout.strip()}"


MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Every module of the package, by its path in the repository (``src/fellows_fsm/...``)."""
    return {f"src/fellows_fsm/{path.relative_to(SRC).as_posix()}": path for path in sorted(SRC.rglob("*.py"))}


def test_no_module_is_over_500_lines() -> None:
    """Every module of src/fellows_fsm has at most 500 lines (a module is one concept; a longer one holds two)."""
    too_long = {
        name: count
        for name, path in _modules().items()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"over {MAX_LINES} lines: {too_long}"


def _module_name(path: Path) -> str:
    parts = ["fellows_fsm", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.Module, modules: set[str]) -> set[str]:
    """The package's modules a module imports (at its top or inside a function), but under ``if TYPE_CHECKING``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                found.add(target if target in modules else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found & modules


def import_graph() -> dict[str, set[str]]:
    """Which of the package's modules each module imports, read from the code (type-only imports aside)."""
    paths = {_module_name(path): path for path in sorted(SRC.rglob("*.py"))}
    modules = set(paths)
    return {
        name: _imported(ast.parse(path.read_text(encoding="utf-8")), modules) - {name} for name, path in paths.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in import order, the first repeated last), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def walk(name: str) -> list[str] | None:
        path.append(name)
        on_path.add(name)
        for target in sorted(graph[name]):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done and (found := walk(target)) is not None:
                return found
        path.pop()
        on_path.discard(name)
        done.add(name)
        return None

    for name in sorted(graph):
        if name not in done and (found := walk(name)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_a_cycle_and_passes_a_tree() -> None:
    """The check below can fail: it names a cycle of three modules and finds none in a tree."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_between_the_packages_modules() -> None:
    """No module of src/fellows_fsm imports, directly or through others, a module that imports it back (imports
    under ``if TYPE_CHECKING`` aside, read from the code with ast): the driver's parts take what they need, never
    the object that holds them."""
    graph = import_graph()
    assert "fellows_fsm.driver.executor" in graph["fellows_fsm.driver.router"]  # the graph is read, not empty
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


MUTATORS = {"append", "extend", "insert", "remove", "pop", "clear", "add", "discard", "update", "setdefault"}


def _others_private(node: ast.expr) -> str | None:
    """``x._field`` (or ``x._field[k]``) for an ``x`` other than ``self`` and ``cls``: the field's dotted name."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
        return None
    owner = node.value
    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
        return None
    return ast.unparse(node)


def _own_fields(cls: ast.ClassDef) -> set[str]:
    """The private fields a class keeps on its own ``self``."""
    return {
        node.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }


def private_writes(tree: ast.Module) -> list[str]:
    """Where a module assigns, or mutates in place, a private field of an object other than its own ``self`` (a
    class writing the same field of another instance of itself, as a copy does, aside)."""
    own: dict[int, set[str]] = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            fields = _own_fields(cls)
            own.update({id(node): fields for node in ast.walk(cls)})
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [
                t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        for target in targets:
            name = _others_private(target)
            if name is not None and name.split("[")[0].rsplit(".", 1)[-1] not in own.get(id(node), set()):
                found.append(f"line {node.lineno}: {name}")
    return found


def test_the_private_write_finder_finds_writes_and_passes_reads() -> None:
    """The check below can fail: it finds an assignment and an append to another object's private field, and not a
    read of one or a write to the module's own ``self``."""
    code = "r._upto, rows = 1, []\nr._out.append(1)\nx = r._upto\nself._mine = 2\nr.public = 3\n"
    assert private_writes(ast.parse(code)) == ["line 1: r._upto", "line 2: r._out"]
    copy = "class C:\n    def fork(self):\n        self._n = 1\n        twin = C()\n        twin._n = self._n\n"
    assert private_writes(ast.parse(copy)) == []


def test_no_module_writes_another_objects_private_fields() -> None:
    """No module of src/fellows_fsm assigns or mutates a private field (``_name``) of an object other than its own
    ``self``: a function that must is a class split in the wrong place (give it the object it needs instead)."""
    writes = {
        name: found for name, path in _modules().items() if (found := private_writes(ast.parse(path.read_text())))
    }
    assert not writes, f"private fields written from outside their class: {writes}"


@pytest.mark.parametrize("part", ["recovery", "withdrawal", "strays"])
def test_the_drivers_parts_do_not_know_the_router(part: str) -> None:
    """Recovery, withdrawal and the stray sweep take the roster, the executor, the journal, the scheduler and the
    clock: none of them imports the Router, not even for its type (so none can reach into it)."""
    tree = ast.parse((SRC / "driver" / f"{part}.py").read_text(encoding="utf-8"))
    named = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "fellows_fsm.driver.router"
        for alias in node.names
    }
    assert not named, f"driver/{part}.py imports {sorted(named)} from driver/router.py"
