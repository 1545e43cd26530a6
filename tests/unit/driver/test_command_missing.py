# ruff: noqa: F811 - the fixtures imported from fixtures.py are parameters here
"""A driver that cannot run SLURM's commands (not on its PATH) spends no rung's window: its cluster counts as not
watched (the clock stops), never as a refusal, so a broken PATH never walks a job to the paid lane."""

from __future__ import annotations

from pathlib import Path

from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler
from fellows_fsm.driver.inbox import enqueue
from fellows_fsm.errors import SlurmCommandMissing

from .fixtures import CAP, PRIORITY, SPEC, MakeRouter, frozen, make_router  # noqa: F401


class NoCommands(FakeScheduler):
    """The fake cluster, whose every command is 'not on PATH' while ``missing`` is set."""

    missing = True

    def _check_reachable(self) -> None:
        if self.missing:
            raise SlurmCommandMissing("the SLURM command 'sbatch' cannot run: not on PATH here (PATH=/nowhere)")
        super()._check_reachable()


def test_a_dispatch_whose_sbatch_cannot_run_never_parks_and_runs_once_it_can(
    make_router: MakeRouter, frozen: FrozenDateTimeFactory, tmp_path: Path
) -> None:
    """Ten caps' worth of polls with sbatch not on PATH: no park, no handoff, the pause journaled naming PATH; with
    the command back, the dispatch is queued on its first rung."""
    port = NoCommands(qos_priority=PRIORITY, qos_gpu_caps={"high-eur": 16}, total_gpus=64)
    r = make_router(scheduler=port)
    dispatch_id = enqueue(r.config, r.journal, SPEC)
    for _ in range(20):
        r.poll()
        frozen.tick(CAP / 2)
    steps = r.journal.steps(dispatch_id)
    assert "park" not in [s.trigger for s in steps]
    assert not (tmp_path / "gcp.ledger").exists()
    assert any("PATH=/nowhere" in s.note for s in steps if s.trigger == "pause")
    port.missing = False
    r.poll()
    r.poll()
    handle = r.handle(dispatch_id)
    assert (handle.qos, handle.slurm_job_id is not None) == ("high-eur", True)
    assert [j.qos for j in port.jobs.values()] == ["high-eur"]
