"""A scripted slurmctld for the scheduler-load benchmark at sizes the local SLURM cannot hold.

It answers the exact argv the real SlurmScheduler sends (sbatch, squeue, sacct, scontrol, scancel) from an
in-memory job table, as the handler of ``fellows_fsm.testing.MockRunner``: the real port and the real
CommandRunner (its retries and failure classes) run, and its command counts are real. Jobs only change when
the benchmark says so; it never models scheduling. ``down`` makes every command answer as an unreachable
controller does.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence

import attrs

from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.observe import SACCT_FIELDS, SQUEUE_FIELDS
from fellows_fsm.slurm.transport import Reply, Request

UNREACHABLE = "{name}: error: Unable to contact slurm controller (connect failure)\n"


@attrs.define
class _Job:
    job_id: str
    qos: str
    comment: str
    time_limit: str = "UNLIMITED"
    """As sbatch got it (--time=), which squeue's TimeLimit prints back here."""
    state: str = "PENDING"
    reason: str = "Resources"
    purged: bool = False

    def squeue_values(self) -> dict[str, str]:
        """This job's squeue fields by name (it never ran: no start, no batch host, no restart)."""
        reason = self.reason if self.state == "PENDING" else "None"
        return {
            "JobID": self.job_id,
            "State": self.state,
            "Reason": reason,
            "QOS": self.qos,
            "StartTime": "N/A",
            "BatchHost": "n/a",
            "RestartCnt": "0",
            "Partition": "gpu",
            "TimeLimit": self.time_limit,
            "Comment": self.comment,
        }

    def sacct_values(self) -> dict[str, str]:
        """This job's sacct fields by name."""
        return {
            "JobID": self.job_id,
            "State": self.state,
            "Reason": "None",
            "QOS": self.qos,
            "Start": "None",
            "NodeList": "None assigned",
            "Comment": self.comment,
        }


def _option(argv: Sequence[str], prefix: str) -> str:
    return next((a.removeprefix(prefix) for a in argv if a.startswith(prefix)), "")


class FakeCtld:
    """The in-memory slurmctld: called with each request a MockRunner's transport gets, it returns the reply."""

    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}
        self.sacct_ids: list[int] = []
        """How many ids each sacct asked for."""
        self.down = False
        """When True, every command gets the answer of an unreachable controller."""
        self._ids = itertools.count(5000)

    def runner(self) -> MockRunner:
        """A real CommandRunner whose commands this slurmctld answers (its back-off sleeps are not slept)."""
        return MockRunner(self)

    def purge(self, job_ids: Sequence[str]) -> None:
        """Make squeue forget jobs (as after MinJobAge); sacct still has them."""
        for job_id in job_ids:
            self.jobs[job_id].purged = True

    def __call__(self, request: Request) -> Reply:
        argv = request.argv
        name = os.path.basename(argv[0])
        if self.down:
            return Reply(1, "", UNREACHABLE.format(name=name), 0.0)
        out, err, code = getattr(self, f"_{name}")(argv)
        return Reply(code, out, err, 0.0)

    def _sbatch(self, argv: tuple[str, ...]) -> tuple[str, str, int]:
        limit = _option(argv, "--time=") or "UNLIMITED"
        job = _Job(str(next(self._ids)), _option(argv, "--qos="), _option(argv, "--comment="), limit)
        self.jobs[job.job_id] = job
        return f"{job.job_id}\n", "", 0

    def _ids_of(self, argv: tuple[str, ...]) -> list[str]:
        return argv[argv.index("-j") + 1].split(",") if "-j" in argv else list(self.jobs)

    def _squeue(self, argv: tuple[str, ...]) -> tuple[str, str, int]:
        lines = []
        for job_id in self._ids_of(argv):
            job = self.jobs.get(job_id)
            if job is None or job.purged:
                continue
            values = job.squeue_values()
            lines.append("".join(values[field] + "|" for field in SQUEUE_FIELDS) + "\n")
        return "".join(lines), "", 0

    def _sacct(self, argv: tuple[str, ...]) -> tuple[str, str, int]:
        ids = self._ids_of(argv)
        self.sacct_ids.append(len(ids))
        lines = [
            "|".join(j.sacct_values()[field] for field in SACCT_FIELDS.split(",")) + "\n"
            for i in ids
            if (j := self.jobs.get(i)) is not None
        ]
        return "".join(lines), "", 0

    def _scontrol(self, argv: tuple[str, ...]) -> tuple[str, str, int]:
        ids = _option(argv, "jobid=").split(",")
        refused = [i for i in ids if i in self.jobs and self.jobs[i].state != "PENDING"]
        err = "".join(f"scontrol: error: Job is no longer pending execution for job {i}\n" for i in refused)
        return "", err, 1 if refused else 0

    def _scancel(self, argv: tuple[str, ...]) -> tuple[str, str, int]:
        if "--version" in argv:
            return "slurm 22.05.8\n", "", 0
        for job_id in (a for a in argv[1:] if not a.startswith("-")):
            job = self.jobs.get(job_id)
            if job is not None and job.state == "PENDING":
                job.state = "CANCELLED"
        return "", "", 0
