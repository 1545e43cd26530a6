# ruff: noqa: F811 - the two-cluster fixtures come from test_cluster_views
"""Every view at 80 and 120 columns (issue 41 item 6): a dispatch id is never cut, reason text is wrapped and never
lost, no column is left zero cells wide, and no line is wider than the terminal."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
from freezegun.api import FrozenDateTimeFactory
from rich.console import Console, RenderableType

from fellows_fsm import FakeScheduler, JobSpec
from fellows_fsm.config.file import load_config
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.snapshot import journaled
from fellows_fsm.journal.store import Journal
from fellows_fsm.ui.live import watch_table
from fellows_fsm.ui.status import status_table
from tests.unit.cli_helpers import SchedulingFake, run
from tests.unit.ui.test_cluster_views import frozen, inst, router, row_of, walk_to_inst  # noqa: F401 - fixtures

WIDTHS = [80, 120]
REASON_WORDS = "Resources: waiting for free GPUs on the nodes"


@pytest.fixture
def walked(env: Path, scheduling_fake: SchedulingFake) -> list[str]:
    """Three dispatches with a long name that walked every rung (a full cluster) to the paid lane."""
    scheduling_fake.total_gpus = 0
    script = env / "a-rather-long-experiment-name-sweep-042.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:8\n#SBATCH --time=1:00:00\nsleep 1\n", encoding="utf-8")
    ids = [run("submit", "--detach", str(script)).stdout.strip() for _ in range(3)]
    assert all(re.fullmatch(r"[0-9a-f]{12}", i) for i in ids), ids
    deadline = time.monotonic() + 30
    with Journal(load_config().journal_path, readonly=True) as journal:
        while not all((row := journal.dispatch(i)) is not None and row.final for i in ids):
            assert time.monotonic() < deadline, "the walks did not end"
            time.sleep(0.05)
    return ids


def _lines(output: str, width: int) -> list[str]:
    lines = output.splitlines()
    assert lines, "nothing printed"
    assert max(len(line) for line in lines) <= width, "\n".join(line for line in lines if len(line) > width)
    return lines


def _words(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_status_shows_every_id_whole(walked: list[str], width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """status at 80 and 120 columns: each dispatch id whole, each header whole, nothing past the width."""
    monkeypatch.setenv("COLUMNS", str(width))
    lines = _lines(run("status", "--all").stdout, width)
    for dispatch_id in walked:
        assert any(dispatch_id in line for line in lines), dispatch_id
    header = next(line for line in lines if "dispatch" in line)
    assert "…" not in header
    assert header.split()[:3] == ["dispatch", "name", "state"]


@pytest.mark.parametrize("width", WIDTHS)
def test_history_wraps_every_reason_and_loses_none(
    walked: list[str], width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """history at 80 and 120 columns: the park reasons' words all there, in order, and no column cut."""
    monkeypatch.setenv("COLUMNS", str(width))
    out = run("history", walked[0]).stdout
    lines = _lines(out, width)
    assert walked[0] in out
    assert _words(out).count(REASON_WORDS) == 3, out  # one park per rung, each reason whole
    assert "…" not in out
    header = next(line for line in lines if line.split()[:2] == ["time", "trigger"])
    assert "QoS" in header.split()


@pytest.mark.parametrize("width", WIDTHS)
def test_spend_and_config_check_fit(walked: list[str], width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """spend and config check at 80 and 120 columns: nothing past the width and no cell cut."""
    monkeypatch.setenv("COLUMNS", str(width))
    for args in (("spend",), ("config", "check"), ("ladder",)):
        result = run(*args)
        assert result.exit_code == 0, result.output
        out = _lines(result.stdout, width)
        assert not any("…" in line for line in out), (args, result.stdout)


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_fits_with_a_legend_when_narrow(width: int, monkeypatch: pytest.MonkeyPatch, env: Path) -> None:
    """simulate at 80 columns uses short headers and spells them out under the table; at 120, the long ones."""
    monkeypatch.setenv("COLUMNS", str(width))
    result = run("simulate", "--park-caps", "60", "--hours", "12")
    assert result.exit_code == 0, result.output
    lines = _lines(result.stdout, width)
    assert ("cap s: park cap in seconds" in result.stdout) == (width == 80)
    assert lines[0].split()[:2] == (["strategy", "cap"] if width == 80 else ["strategy", "park"])


def _render(renderable: RenderableType, width: int) -> str:
    console = Console(file=io.StringIO(), width=width)
    console.print(renderable)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


@pytest.mark.parametrize("width", WIDTHS)
def test_two_clusters_status_and_watch_keep_ids_and_job_ids_whole(
    router: Router, frozen: FrozenDateTimeFactory, inst: FakeScheduler, width: int
) -> None:
    """With a job on inst and long names, status and the live table at 80 and 120 columns show each dispatch id
    and job id whole and no header cut; the live table's countdowns are there, in a column or under the row."""
    on_inst = walk_to_inst(router, frozen, run=True, inst=inst)
    long = JobSpec(name="a-rather-long-experiment-name-sweep-042", script="train.sbatch", gpus=8)
    pending = router.dispatch(long).dispatch_id
    frozen.tick(5)
    router.poll()
    snaps = [journaled(router.journal, row_of(router, i)) for i in (on_inst, pending)]
    status = _render(status_table(snaps, updated={on_inst: time.time(), pending: time.time()}), width)
    live = _render(watch_table(snaps, now=time.time(), next_lane="gcp"), width)
    for out in (status, live):
        lines = _lines(out, width)
        for expected in (on_inst, pending, "1000@inst", "RUNNING", "SUBMITTED(high-eur)"):
            assert expected in out, (expected, out)
        header = next(line for line in lines if line.split()[:1] == ["dispatch"])
        assert "…" not in header
    assert "55s" in live  # parks in
    assert "6m 55s" in live  # gcp in: a column, or a labelled line under the row
    assert ("gcp in: 6m 55s" in live) == (width == 80)
    assert "…" not in re.sub(r"a-rather-long-\S*…", "", live)  # only a name gives way
