"""The package's shape: the embedding API loads no terminal libraries, and no module is over 400 lines."""

from __future__ import annotations

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


MAX_LINES = 400
TOO_LONG_FOR_NOW = {"src/fellows_fsm/router.py", "src/fellows_fsm/core/dispatch.py"}
"""Modules still over MAX_LINES, each to be split and then taken off this list (which is meant to end empty)."""


def _modules() -> dict[str, Path]:
    """Every module of the package, by its path in the repository (``src/fellows_fsm/...``)."""
    return {f"src/fellows_fsm/{path.relative_to(SRC).as_posix()}": path for path in sorted(SRC.rglob("*.py"))}


def test_no_module_is_over_400_lines() -> None:
    """Every module of src/fellows_fsm has at most 400 lines (a longer one is split by responsibility), except
    those on the temporary TOO_LONG_FOR_NOW list."""
    too_long = {
        name: count
        for name, path in _modules().items()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES and name not in TOO_LONG_FOR_NOW
    }
    assert not too_long, f"over {MAX_LINES} lines: {too_long}"


def test_the_allow_list_names_only_modules_that_exist() -> None:
    """Each entry of TOO_LONG_FOR_NOW is a module of the package (one moved or deleted comes off the list)."""
    assert set(_modules()) >= TOO_LONG_FOR_NOW
