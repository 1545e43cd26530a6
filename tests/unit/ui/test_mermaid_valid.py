"""The mermaid that fellows-fsm generates parses with mermaid's own parser (tests/mermaid/validate.mjs on Node.js)."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from fellows_fsm import cli
from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import State
from fellows_fsm.journal.history import HistoryEntry
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.testing import ThreadedDriver
from fellows_fsm.ui import app as ui_app
from fellows_fsm.ui.diagram import mermaid, spine_mermaid, state_diagram_page
from fellows_fsm.ui.paths import path_mermaid
from tests.unit.cli_helpers import CAPS, GRANTS, PRIORITY, SchedulingFake, fill

MERMAID_DIR = Path(__file__).resolve().parents[2] / "mermaid"
VALIDATE = MERMAID_DIR / "validate.mjs"
INSTALL = "npm ci --prefix tests/mermaid"
BROKEN = "stateDiagram-v2\n  A --> : [\n"
T0 = 1_796_040_000.0  # 2026-11-30 12:00:00 UTC, the suite's usual start


def _node() -> str:
    """The node program, or a failure (in CI) / skip (elsewhere) naming what to install."""
    node = shutil.which("node")
    if node is None:
        missing = "node not found: install Node.js and npm (apt-get install nodejs npm), then run " + INSTALL
    elif not (MERMAID_DIR / "node_modules" / "mermaid").is_dir():
        missing = f"tests/mermaid/node_modules is missing: run {INSTALL}"
    else:
        return node
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing)


def validate(node: str, texts: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run validate.mjs once with ``node`` on ``texts`` (name -> mermaid text, as JSON on stdin)."""
    return subprocess.run(
        [node, str(VALIDATE)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _entry(at: float, source: str | None, dest: str, trigger: str) -> HistoryEntry:
    """A history line between two machine states (labels and names alike), for drawing a path."""
    return HistoryEntry(
        at=at,
        source=source,
        dest=dest,
        trigger=trigger,
        qos=None,
        slurm_job_id=None,
        reason=None,
        source_name=source,
        dest_name=dest,
    )


def _walked_to_gcp() -> list[HistoryEntry]:
    """Every rung of the default ladder parked out, then handed to GCP: all ladder edges plus an extra state."""
    names = ["SUBMITTED_high_eur", "RESUBMITTED_normal_eur", "RESUBMITTED_low_eur"]
    entries = [_entry(T0, None, names[0], "submit")]
    for i, rung in enumerate(names):
        entries.append(_entry(entries[-1].at + 600, rung, "PARKED", "park"))
        entries.append(_entry(entries[-1].at + 5, "PARKED", "CANCELLED", "cancel"))
        nxt = names[i + 1] if i + 1 < len(names) else State.FAILED_TO_GCP
        entries.append(
            _entry(entries[-1].at + 1, "CANCELLED", nxt, "give_up" if nxt == State.FAILED_TO_GCP else "resubmit")
        )
    entries.append(_entry(entries[-1].at + 2, State.FAILED_TO_GCP, State.HANDED_OFF, "hand_off"))
    return entries


TWO_CLUSTERS = Config(
    fellows=SlurmSettings(park_cap_seconds=600),
    lanes=(SlurmSettings(name="inst", qos="inst-high", qos_ladder=("inst-low",), host="inst"),),
).ladder_for("prod")
"""fellows' three rungs, then the second cluster's two (issue 26): the path of a dispatch across clusters."""


def _walked_to_inst() -> list[HistoryEntry]:
    """fellows' whole ladder parked out, then the job runs on inst's first rung."""
    names = [r.state_name for r in TWO_CLUSTERS.rungs[:4]]
    entries = [_entry(T0, None, names[0], "submit")]
    for rung, nxt in itertools.pairwise(names):
        entries.append(_entry(entries[-1].at + 600, rung, "PARKED", "park"))
        entries.append(_entry(entries[-1].at + 5, "PARKED", "CANCELLED", "cancel"))
        entries.append(_entry(entries[-1].at + 1, "CANCELLED", nxt, "resubmit"))
    entries.append(_entry(entries[-1].at + 30, names[-1], State.RUNNING, "start"))
    return entries


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SchedulingFake]:
    """A config with 0.3 s park caps in tmp_path and the CLI's seam pointed at a scheduling fake cluster."""
    fake = SchedulingFake(qos_priority=PRIORITY, qos_gpu_caps=CAPS, total_gpus=64)
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:8\n#SBATCH --time=1:00:00\n#SBATCH -J train\nsleep 1\n")
    config = tmp_path / "fellows.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n\n[fellows]\npark_cap_seconds = 0.3\npoll_interval_seconds = 0.05\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("FELLOWS_FSM_CONFIG", str(config))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ui_app, "make_scheduler", lambda config: fake)
    monkeypatch.setattr(ui_app, "read_grants", lambda scheduler: GRANTS)
    drivers = ThreadedDriver(fake)  # the background driver, in a thread on the fake
    monkeypatch.setattr(ui_app, "start_driver", drivers)
    yield fake
    drivers.close()


def _cli(*args: str) -> str:
    """Run fellows-fsm in-process; its stdout (it must exit 0)."""
    result = CliRunner().invoke(cli.main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def _dispatch_path_from_cli(fake: SchedulingFake) -> str:
    """`fellows-fsm diagram --dispatch` of a dispatch that parked on high-eur and started on normal-eur."""
    fill(fake, "high-eur")
    dispatch_id = json.loads(_cli("submit", "--json", "train.sbatch"))["dispatch_id"]
    text = _cli("diagram", "--dispatch", dispatch_id)
    assert "class RUNNING current" in text  # the path really is marked, so its marks are what gets parsed
    assert sum("✔" in line for line in text.splitlines()) == 5
    return text


def _page_blocks() -> dict[str, str]:
    """The fenced mermaid blocks of docs/state-diagram.md as generated (the spine, every row, then the handoff)."""
    blocks = re.findall(r"^```mermaid\n(.*?)^```$", state_diagram_page(), flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) == 3
    return {f"docs page block {i}": str(block) for i, block in enumerate(blocks, 1)}


def test_generated_mermaid_parses(cli_env: SchedulingFake) -> None:
    """Every kind of mermaid the project generates is accepted by mermaid.parse (one node run for all)."""
    node = _node()
    ladder = SlurmSettings(park_cap_seconds=600).ladder
    texts = {
        "reference ladder": mermaid(ladder),
        "reference spine": spine_mermaid(ladder),
        "one-rung spine": spine_mermaid(SlurmSettings(park_cap_seconds=600, qos_ladder=[]).ladder),
        "debug ladder": mermaid(SlurmSettings(park_cap_seconds=600, debug_qos="dev-eur").ladder_for("debug")),
        "one-rung ladder": mermaid(SlurmSettings(park_cap_seconds=600, qos_ladder=[]).ladder),
        **_page_blocks(),
        "dispatch path (cli)": _dispatch_path_from_cli(cli_env),
        "dispatch path to gcp": path_mermaid(ladder, _walked_to_gcp(), title="dispatch to-gcp"),
        "dispatch path withdrawn": path_mermaid(
            ladder,
            [
                _entry(T0, None, "SUBMITTED_high_eur", "submit"),
                _entry(T0 + 30, "SUBMITTED_high_eur", State.WITHDRAWN, "withdraw"),
            ],
            title="dispatch withdrawn",
        ),
        "dispatch path none": path_mermaid(ladder, [], title="dispatch unsent"),
        "dispatch path across clusters": path_mermaid(
            TWO_CLUSTERS, _walked_to_inst(), title="dispatch across · fellows → inst"
        ),
    }
    assert 'state "SUBMITTED(dev-eur)" as SUBMITTED_dev_eur' in texts["debug ladder"]
    result = validate(node, texts)
    assert result.returncode == 0, f"mermaid rejects generated text:\n{result.stdout}{result.stderr}"


def test_validator_rejects_broken_mermaid() -> None:
    """A broken text makes validate.mjs exit 1 with one line naming it, and a valid neighbour is not named."""
    result = validate(_node(), {"broken": BROKEN, "fine": "stateDiagram-v2\n  A --> B: go\n"})
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = result.stdout.splitlines()
    assert line.startswith("broken: Parse error on line 2"), line
