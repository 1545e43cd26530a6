"""The example program of docs/python-api.md, extracted from the page and run as written on the real local SLURM."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fellows_fsm.journal.store import Journal

from .conftest import REPO, Cluster
from .settled import assert_settled
from .test_cli_real import _config

pytestmark = pytest.mark.slurm

PAGE = REPO / "docs" / "python-api.md"


def example_program() -> str:
    """The one ```python block of docs/python-api.md."""
    [program] = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    return program


def _train_script(slurm: Cluster) -> str:
    """A sleeping job that asks for its 8 GPUs, wall time and name in its #SBATCH lines, as the page says."""
    path = Path(slurm.script(300, name="train.sbatch"))
    path.write_text(
        "#!/bin/bash\n#SBATCH --gres=gpu:8\n#SBATCH --time=1:00:00\n#SBATCH --job-name=train\nsleep 300\n",
        encoding="utf-8",
    )
    return str(path)


def test_the_documented_example_walks_a_full_high_eur_to_normal_eur(slurm: Cluster, tmp_path: Path) -> None:
    """Run as written (config from $FELLOWS_FSM_CONFIG), the example reads its 8 GPUs from the script's #SBATCH
    lines (``JobSpec.from_script``), so a high-eur full of the user's own 16 GPUs parks it: it drives its dispatch
    to normal-eur, prints each change and the history, and exits 0 with the job RUNNING there."""
    slurm.occupy("high-eur", 8, count=2)
    program = tmp_path / "train_on_fellows.py"
    program.write_text(example_program(), encoding="utf-8")
    env = {**os.environ, "FELLOWS_FSM_CONFIG": str(_config(tmp_path))}
    result = subprocess.run(
        [sys.executable, str(program), _train_script(slurm), *slurm.job_args()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    found = re.fullmatch(r"dispatch ([0-9a-f]{12}) \(this process drives the journal\)", lines[0])
    assert found is not None, lines[0]
    dispatch_id = found.group(1)
    changes = [line.split()[0] for line in lines[1:] if line.startswith("  ") and "qos=" in line]
    assert changes[0] == "SUBMITTED(high-eur)"
    assert changes[-1] == "RUNNING"
    history = [line.split()[0] for line in lines if line.startswith("  ") and "->" in line]
    assert history == ["submit", "park", "cancel", "resubmit", "start"]
    assert re.fullmatch(rf"{dispatch_id} is RUNNING on fellows \(normal-eur\), job \d+", lines[-1]), lines[-1]
    journal = Journal(tmp_path / "state" / "journal.sqlite3", readonly=True)
    try:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        assert (row.spec["gpus"], row.spec["time_limit_seconds"], row.spec["name"]) == (8, 3600, "train")
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
    finally:
        journal.close()


def test_the_documented_example_refuses_an_array_as_submit_does(slurm: Cluster, tmp_path: Path) -> None:
    """Given `--array=0-2` after the script, the example prints the CLI's one refusal line and exits 2, with no job
    queued and no dispatch journaled (it once ran the job seven times)."""
    program = tmp_path / "train_on_fellows.py"
    program.write_text(example_program(), encoding="utf-8")
    env = {**os.environ, "FELLOWS_FSM_CONFIG": str(_config(tmp_path))}
    before = [r.job_id for r in slurm.queue()]
    result = subprocess.run(
        [sys.executable, str(program), slurm.script(300), *slurm.job_args(), "--array=0-2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: sbatch option '--array=0-2' "), line
    assert [r.job_id for r in slurm.queue()] == before
    journal = tmp_path / "state" / "journal.sqlite3"
    if journal.exists():
        opened = Journal(journal, readonly=True)
        try:
            assert opened.dispatches() == []
        finally:
            opened.close()
