"""The live view in a real terminal at 80 columns (issue 41 item 6): `submit` followed in a tmux pane 80 cells wide
while its walk parks out of high-eur on the real local SLURM; the id is whole and no line wraps past the pane."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_harness import FELLOWS_FSM, check_settled, final_row, ledger_config, submit_args
from .conftest import Cluster

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        shutil.which("tmux") is None,
        reason="tmux is not installed here (the Debian 13 root has none: the view does not depend on SLURM's version)",
    ),
]

WIDTH = 80


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    """A tmux server of this test's own (its socket in tmp_path), killed after it."""
    base = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True, check=False)


def _pane(tmux: list[str]) -> list[str]:
    """The pane's lines as the terminal shows them, a wrapped line joined back (-J) so an overlong one shows whole."""
    out = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-t", "view"], capture_output=True, text=True, check=True)
    return out.stdout.rstrip("\n").splitlines()


def test_the_live_view_of_submit_fits_an_80_column_terminal(slurm: Cluster, tmp_path: Path, tmux: list[str]) -> None:
    """high-eur full, the walk parks out to normal-eur in an 80x40 pane: the panel names the dispatch id whole (the
    journal's), every line of the view fits 80 cells, and the walk settles with one job."""
    slurm.occupy("high-eur", 8, count=2)
    config = ledger_config(tmp_path, cap=3, poll=0.5)
    command = shlex.join([str(FELLOWS_FSM), "--config", str(config), *submit_args(slurm, seconds=60)])
    env = [f"-e{k}={v}" for k, v in os.environ.items() if k.startswith(("SLURM", "PATH", "FELLOWS"))]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "view", "-x", str(WIDTH), "-y", "40", *env, f"{command}; sleep 600"],
        check=True,
    )
    ids: list[str] = []

    def walked_on() -> bool:
        text = "\n".join(_pane(tmux))
        ids[:] = re.findall(r"dispatch ([0-9a-f]{12})\b", text)
        return bool(ids) and "normal-eur" in text and "RESUBMITTED" in text

    slurm.wait_for(walked_on, "the live view to show the walk on normal-eur", timeout=60, tick=0.25)
    lines = _pane(tmux)
    # The live view's own lines: the panel and the steps under it (a note on stderr is one logical line, which the
    # terminal wraps: scripts read it whole).
    view = [line for line in lines if line.startswith(("╭", "│", "╰")) or re.match(r"\d\d:\d\d:\d\d  ", line)]
    assert len(view) >= 8, "\n".join(lines)
    assert max(len(line.rstrip()) for line in view) <= WIDTH, "\n".join(lines)
    dispatch_id = ids[0]
    row = final_row(slurm, tmp_path, dispatch_id, timeout=90)
    assert row.id == dispatch_id
    assert row.qos == "normal-eur"
    subprocess.run([*tmux, "send-keys", "-t", "view", "C-c"], check=False)
    check_settled(slurm, tmp_path, [dispatch_id])
