"""The package's shape: the embedding API loads no terminal libraries."""

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
