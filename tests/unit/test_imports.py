"""The package's shape: the embedding API loads no terminal libraries, and no module is over 500 lines."""

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


MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Every module of the package, by its path in the repository (``src/fellows_fsm/...``)."""
    return {f"src/fellows_fsm/{path.relative_to(SRC).as_posix()}": path for path in sorted(SRC.rglob("*.py"))}


def test_no_module_is_over_500_lines() -> None:
    """Every module of src/fellows_fsm has at most 500 lines (a module is one concept: a longer one holds more than
    one)."""
    too_long = {
        name: count
        for name, path in _modules().items()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"over {MAX_LINES} lines: {too_long}"
