"""The real local SLURM for integration tests: brought up once per session, emptied after every test.

``scripts/dev-slurm up`` starts it (outside CI an unavailable cluster skips these tests; with CI=true it
fails them), ``scripts/dev-slurm down`` stops it at the end unless FELLOWS_SLURM_KEEP=1.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import attrs
import pytest

from fellows_fsm.scheduler.port import JobSpec, Phase
from fellows_fsm.slurm.observe import JobRow
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.testing import Driven

REPO = Path(__file__).resolve().parents[2]
DEV_SLURM = REPO / "scripts" / "dev-slurm"
RUNTIME = Path(os.environ.get("FELLOWS_SLURM_RUNTIME", "/tmp/fellows-slurm"))
USER = pwd.getpwuid(os.getuid()).pw_name
QUEUE_FORMAT = "%i|%T|%r|%q|%B|%k"
TICK_SECONDS = 0.3


@attrs.frozen
class QueueRow:
    """One job as raw squeue shows it, for assertions independent of the port's own parsing."""

    job_id: str
    state: str
    reason: str
    qos: str
    batch_host: str
    comment: str

    @property
    def ever_ran(self) -> bool:
        """True if the job got a batch host, i.e. it really started."""
        return self.batch_host not in ("", "n/a", "(null)")


def _run(argv: Sequence[str], *, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


class Cluster:
    """Handles on the running dev cluster: raw queue reads, blocker jobs, job scripts, a fresh port."""

    def __init__(self, slurm_conf: str) -> None:
        self.slurm_conf = slurm_conf
        self.jobs_dir = RUNTIME / "jobs"

    # ----------------------------------------------------------------- raw reads
    def queue(self) -> list[QueueRow]:
        """Every job squeue still shows (all states), straight from squeue."""
        out = _run(["squeue", "-h", "-t", "all", "-o", QUEUE_FORMAT]).stdout
        return [QueueRow(*line.split("|", 5)) for line in out.splitlines() if line.strip()]

    def jobs_of(self, dispatch: Driven) -> list[QueueRow]:
        """The jobs tagged with any of ``dispatch``'s rung tokens, oldest first."""
        prefix = f"fsm-{dispatch.id}-r"
        return sorted((r for r in self.queue() if r.comment.startswith(prefix)), key=lambda r: int(r.job_id))

    def row(self, job_id: str) -> QueueRow:
        """The raw squeue row of one job."""
        return next(r for r in self.queue() if r.job_id == job_id)

    def sacct_row(self, job_id: str, timeout: float = 10) -> JobRow:
        """The port's own sacct reading of a job, once slurmdbd records it as ended (sacct lags squeue)."""
        observer = self.port().observer
        found: list[JobRow] = []

        def ended() -> bool:
            found[:] = [row for key, row in observer.sacct_rows([job_id]).items() if key == job_id]
            return bool(found) and found[0].observation.phase is not Phase.PENDING

        self.wait_for(ended, f"sacct to record job {job_id} as ended", timeout=timeout, tick=0.2)
        return found[0]

    def live_ids(self) -> list[str]:
        """Ids of every job that is pending, running or completing."""
        out = _run(["squeue", "-h", "-o", "%i"]).stdout
        return out.split()

    # ----------------------------------------------------------------- making jobs
    def script(self, seconds: int = 300, name: str = "sleep.sh") -> str:
        """A bash job script that sleeps; written under the 1777 jobs dir, in a per-call folder."""
        folder = self.jobs_dir / f"it-{uuid.uuid4().hex[:8]}"
        folder.mkdir(mode=0o777)
        path = folder / name
        path.write_text(f"#!/bin/bash\nsleep {seconds}\n")
        path.chmod(0o755)
        return str(path)

    def job_args(self) -> tuple[str, ...]:
        """sbatch options every test job needs: a writable working dir and no output file."""
        return (f"--chdir={self.jobs_dir}", "--output=/dev/null")

    def spec(
        self, *, gpus: int = 8, seconds: int = 300, time_limit: int | None = None, extra: Sequence[str] = ()
    ) -> JobSpec:
        """A JobSpec for a sleeping job, with the options every test job needs."""
        return JobSpec(
            name=f"it-{uuid.uuid4().hex[:6]}",
            script=self.script(seconds),
            gpus=gpus,
            time_limit_seconds=time_limit,
            extra_args=(*self.job_args(), *extra),
        )

    def occupy(self, qos: str, gpus: int, count: int = 1, *, time_minutes: int | None = None) -> list[str]:
        """Start ``count`` running ``gpus``-GPU jobs on ``qos`` (this user's other work) and wait for them; with
        ``time_minutes`` they carry that time limit (so SLURM can estimate when they end)."""
        ids = []
        for _ in range(count):
            argv = ["sbatch", "--parsable", f"--qos={qos}", f"--gres=gpu:{gpus}", "--job-name=blocker"]
            if time_minutes is not None:
                argv.append(f"--time={time_minutes}")
            ids.append(_run([*argv, *self.job_args(), self.script(300)]).stdout.strip().split(";")[0])
        self.wait_for(lambda: all(self.row(i).state == "RUNNING" for i in ids), f"blockers {ids} to run")
        return ids

    def cancel(self, *job_ids: str) -> None:
        """Cancel jobs outright (any state)."""
        _run(["scancel", *job_ids])

    # ----------------------------------------------------------------- waiting and driving
    @staticmethod
    def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20, tick: float = 0.1) -> None:
        """Poll ``condition`` until it holds, else fail naming ``what``."""
        end = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(tick)

    def port(self) -> SlurmScheduler:
        """A fresh SlurmScheduler with its own call counter."""
        return SlurmScheduler(CommandRunner(timeout_seconds=20))

    @staticmethod
    def drive(
        dispatches: Sequence[Driven],
        port: SlurmScheduler,
        *,
        until: Callable[[], bool],
        timeout: float,
        tick: float = TICK_SECONDS,
    ) -> int:
        """The router's poll loop in small: one observe of every live job per tick, then advance each.

        Returns the number of ticks; fails if ``until`` does not hold within ``timeout`` seconds.
        """
        end = time.monotonic() + timeout
        ticks = 0
        while True:
            live = [d.job_id for d in dispatches if d.job_id is not None and not d.is_final]
            seen = port.observe(live) if live else {}
            for d in dispatches:
                d.advance(seen.get(d.job_id) if d.job_id is not None else None)
            ticks += 1
            if until():
                return ticks
            if time.monotonic() > end:
                states = ", ".join(f"{d.id}: {d.label} job {d.job_id}" for d in dispatches)
                raise AssertionError(f"timed out after {timeout} s; {states}")
            time.sleep(tick)

    def empty_queue(self, timeout: float = 30) -> None:
        """Cancel every job of this user and wait until none is pending, running or completing."""
        _run(["scancel", "-u", USER], check=False)
        self.wait_for(lambda: not self.live_ids(), "the queue to empty", timeout=timeout, tick=0.2)


def _unavailable(why: str) -> None:
    """Skip outside CI; in CI a cluster that cannot come up is a failure, never a silent skip."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the local SLURM is required in CI: {why}", pytrace=False)
    pytest.skip(f"no local SLURM: {why}")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The dev cluster, up for the whole session; every job cancelled and the cluster down at the end."""
    if os.geteuid() != 0:
        _unavailable("scripts/dev-slurm needs root")
    if not os.access(DEV_SLURM, os.X_OK):
        _unavailable(f"{DEV_SLURM} is missing or not executable")
    try:
        up = _run([str(DEV_SLURM), "up"], timeout=900, check=False)
    except subprocess.TimeoutExpired:
        _unavailable("scripts/dev-slurm up did not finish within 900 s")
    if up.returncode != 0:
        _unavailable(f"scripts/dev-slurm up exited {up.returncode}: {(up.stderr or up.stdout).strip()[-2000:]}")
    env_line = _run([str(DEV_SLURM), "env"]).stdout.strip()
    slurm_conf = env_line.removeprefix("export SLURM_CONF=").strip("'\"")
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", slurm_conf)
    handle = Cluster(slurm_conf)
    try:
        handle.empty_queue()
        yield handle
    finally:
        try:
            handle.empty_queue()
        finally:
            if os.environ.get("FELLOWS_SLURM_KEEP") != "1":
                _run([str(DEV_SLURM), "down"], timeout=120, check=False)
            patch.undo()


@pytest.fixture
def slurm(cluster: Cluster) -> Iterator[Cluster]:
    """The dev cluster for one test; every job this user left behind is cancelled afterwards."""
    yield cluster
    cluster.empty_queue()


from .ledger_pg import ledger_url, postgres  # noqa: E402, F401  (the shared ledger's PostgreSQL)
from .two_clusters import second_cluster, second_slurm  # noqa: E402, F401  (the second cluster's fixtures)
