"""A dispatch's path on the state diagram (ui/paths.py) through `fellows-fsm diagram`: mermaid, DOT and SVG, and
what to install when graphviz is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fellows_fsm.ui import paths as ui_paths
from tests.unit.cli_helpers import SchedulingFake, fill, one_error_line, run


def test_diagram_of_a_dispatch_marks_its_path(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--dispatch marks the visited states and taken edges with their times, the final state as current."""
    fill(scheduling_fake, "high-eur")
    dispatch_id = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    text = run("diagram", "--dispatch", dispatch_id).stdout
    assert f"title: dispatch {dispatch_id}" in text
    assert "class RUNNING current" in text
    assert "class SUBMITTED_high_eur,PARKED,CANCELLED,RESUBMITTED_normal_eur visited" in text
    taken = [line for line in text.splitlines() if "✔" in line]
    assert len(taken) == 5  # submit, park, cancel, resubmit, start
    assert not any("RESUBMITTED_low_eur" in line for line in taken)


def test_diagram_dot_of_a_dispatch(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--format dot draws the path in Graphviz DOT (skipped without the graphviz extra)."""
    pytest.importorskip("graphviz")
    fill(scheduling_fake, "high-eur")
    dispatch_id = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    result = run("diagram", "--format", "dot", "--dispatch", dispatch_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f'digraph "dispatch {dispatch_id}"')
    assert "penwidth=2.5" in result.stdout


def test_diagram_svg_is_a_valid_svg_document(env: Path, tmp_path: Path) -> None:
    """--format svg writes a well-formed SVG document showing every state of the ladder."""
    import xml.etree.ElementTree as ET  # noqa: PLC0415 - only this test parses XML

    out = tmp_path / "lifecycle.svg"
    result = run("diagram", "--format", "svg", "-o", str(out))
    assert result.exit_code == 0, result.output
    root = ET.fromstring(out.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for label in ("SUBMITTED(high-eur)", "RESUBMITTED(normal-eur)", "RESUBMITTED(low-eur)", "FAILED_TO_GCP"):
        assert label in texts


@pytest.mark.parametrize(
    ("fmt", "missing", "words"),
    [("dot", "find_spec", "pip install 'fellows-fsm[graphviz]'"), ("svg", "which", "apt-get install graphviz")],
    ids=["dot-without-python-graphviz", "svg-without-dot"],
)
def test_diagram_names_what_to_install(
    env: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, missing: str, words: str
) -> None:
    """Without graphviz, dot and svg fail with one line naming what to install."""
    if missing == "find_spec":
        monkeypatch.setattr(ui_paths, "find_spec", lambda name: None)
    else:
        pytest.importorskip("graphviz")
        monkeypatch.setattr(ui_paths.shutil, "which", lambda name: None)
    result = run("diagram", "--format", fmt)
    assert result.exit_code == 1
    assert words in one_error_line(result)
