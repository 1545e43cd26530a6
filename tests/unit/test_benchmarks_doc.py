"""docs/benchmarks.md is what `python -m benchmarks.render` writes from benchmarks/results/ and benchmarks/notes/:
a figure typed into the doc by hand, or a result the doc no longer shows, fails here (rerun the render)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def test_the_doc_is_the_render_of_the_kept_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "benchmarks.md"
    monkeypatch.setattr(render, "DOC", out)
    render.main()
    rendered, kept = out.read_text(encoding="utf-8").splitlines(), DOC.read_text(encoding="utf-8").splitlines()
    differ = [i + 1 for i, (a, b) in enumerate(zip(rendered, kept, strict=False)) if a != b]
    assert (differ[:1], len(rendered)) == ([], len(kept)), (
        f"docs/benchmarks.md differs from the render from line {differ[:1] or min(len(rendered), len(kept))}: "
        "put new prose in benchmarks/notes/, then `.venv/bin/python -m benchmarks.render`"
    )
