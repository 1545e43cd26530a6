"""A second real SLURM cluster ("inst") beside the first, reached by the router only over its own sshd.

``second_cluster`` brings it up once per session, only when a test asks for it (scripts/dev-slurm and
scripts/dev-sshd with FELLOWS_SLURM_PROFILE=inst), and takes both down at the end. The test's own checks may use
its SLURM_CONF directly; the router under test must go through ``host`` and ``ssh_options``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from .conftest import DEV_SLURM, QUEUE_FORMAT, REPO, RUNTIME, USER, Cluster, QueueRow

DEV_SSHD = REPO / "scripts" / "dev-sshd"
PROFILE = "inst"


def _profile_env(**extra: str) -> dict[str, str]:
    """This process's environment for the scripts of the inst profile (SLURM_CONF left to them)."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env.update(FELLOWS_SLURM_PROFILE=PROFILE, **extra)
    return env


def _script(tool: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run scripts/dev-slurm or scripts/dev-sshd for the inst profile; fail naming its output if it fails."""
    proc = subprocess.run(
        [str(tool), *args], capture_output=True, text=True, timeout=timeout, env=_profile_env(), check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"{tool.name} {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc


class SecondCluster:
    """The inst cluster: what a `[lanes.inst] kind = "slurm"` needs, and the test's own handles on it."""

    name = "inst"
    host = "inst-cluster"
    partition = "h200"
    account = "inst-acct"
    qos_ladder = ("inst-high", "inst-low")
    ungranted_qos = "inst-other"
    gpus = 32
    gres_type = "h200"
    gpu_cap_per_user = 8  # on each of qos_ladder

    def __init__(self, runtime: Path, first: Cluster) -> None:
        self.runtime = runtime
        self.slurm_conf = str(runtime / "etc" / "slurm.conf")
        self.ssh_config = runtime / "sshd" / "ssh_config"
        self.jobs_dir = runtime / "jobs"
        self.first = first

    @property
    def ssh_options(self) -> tuple[str, ...]:
        """The ``ssh_options`` of a lane on this cluster (``host`` is :attr:`host`)."""
        return ("-F", str(self.ssh_config))

    def gres(self, gpus: int) -> str:
        """The typed GPU request this cluster names its GPUs with."""
        return f"gpu:{self.gres_type}:{gpus}"

    def lane_toml(self, lane: str = "inst", extra: str = "") -> str:
        """A `[lanes.<lane>] kind = "slurm"` table reaching this cluster over its sshd, in issue 26's key names
        (``extra``: more lines, e.g. park caps)."""
        return (
            f'[lanes.{lane}]\nkind = "slurm"\nhost = "{self.host}"\n'
            f"ssh_options = {json.dumps(list(self.ssh_options))}\n"
            f'remote_workdir = "{self.jobs_dir}"\npartition = "{self.partition}"\naccount = "{self.account}"\n'
            f'qos = "{self.qos_ladder[0]}"\nqos_ladder = {json.dumps(list(self.qos_ladder[1:]))}\n'
            f'gres = "gpu:{self.gres_type}:{{gpus}}"\n{extra}'
        )

    # ----------------------------------------------------------------- running commands
    def env(self) -> dict[str, str]:
        """This process's environment with the inst cluster's SLURM_CONF (for the test's own checks)."""
        return {**os.environ, "SLURM_CONF": self.slurm_conf}

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """A SLURM client run here against the inst cluster (the test's side, never the router's)."""
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=self.env(), check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} (inst) exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def ssh(
        self, command: str, *, timeout: float = 30, options: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        """``command`` (one remote shell line) over the inst sshd, as a workstation would run it; never raises."""
        # ssh keeps the first value of an option: the caller's options come before the default of no master.
        argv = ["ssh", *self.ssh_options, "-o", "BatchMode=yes", *options, "-o", "ControlPath=none", self.host]
        return subprocess.run([*argv, command], capture_output=True, text=True, timeout=timeout, check=False)

    # ----------------------------------------------------------------- raw reads
    def queue(self) -> list[QueueRow]:
        """Every job the inst squeue still shows (all states)."""
        out = self.run("squeue", "-h", "-t", "all", "-o", QUEUE_FORMAT).stdout
        return [QueueRow(*line.split("|", 5)) for line in out.splitlines() if line.strip()]

    def jobs_of(self, dispatch_id: str) -> list[QueueRow]:
        """The inst jobs tagged with any rung token of dispatch ``dispatch_id``, oldest first."""
        prefix = f"fsm-{dispatch_id}-r"
        return sorted((r for r in self.queue() if r.comment.startswith(prefix)), key=lambda r: int(r.job_id))

    def row(self, job_id: str) -> QueueRow:
        """The raw inst squeue row of one job."""
        return next(r for r in self.queue() if r.job_id == job_id)

    def live_ids(self) -> list[str]:
        """Ids of every inst job that is pending, running or completing."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    # ----------------------------------------------------------------- making jobs
    def script(self, seconds: int = 300) -> str:
        """A sleeping job script under the inst cluster's 1777 jobs dir."""
        folder = self.jobs_dir / f"it-{uuid.uuid4().hex[:8]}"
        folder.mkdir(mode=0o777)
        path = folder / "sleep.sh"
        path.write_text(f"#!/bin/bash\nsleep {seconds}\n")
        path.chmod(0o755)
        return str(path)

    def job_args(self) -> tuple[str, ...]:
        """sbatch options every job here needs: its partition and account, a writable dir, no output file."""
        return (
            f"--partition={self.partition}",
            f"--account={self.account}",
            f"--chdir={self.jobs_dir}",
            "-o",
            "/dev/null",
        )

    def submit(self, qos: str, gpus: int, *extra: str, seconds: int = 300) -> str:
        """Submit one sleeping ``gpus``-GPU job on ``qos`` here; its id."""
        argv = ["sbatch", "--parsable", f"--qos={qos}", f"--gres={self.gres(gpus)}", *self.job_args(), *extra]
        return self.run(*argv, self.script(seconds)).stdout.strip().split(";")[0]

    def occupy(self, qos: str, gpus: int | None = None, count: int = 1) -> list[str]:
        """Start ``count`` running blocker jobs on ``qos`` (default: one at this user's whole cap) and wait for them."""
        ids = [self.submit(qos, gpus or self.gpu_cap_per_user, "--job-name=blocker") for _ in range(count)]
        self.wait_for(lambda: all(self.row(i).state == "RUNNING" for i in ids), f"inst blockers {ids} to run")
        return ids

    def cancel(self, *job_ids: str) -> None:
        """Cancel inst jobs outright (any state)."""
        self.run("scancel", *job_ids)

    def empty_queue(self, timeout: float = 30) -> None:
        """Cancel every inst job of this user and wait until none is pending, running or completing."""
        self.run("scancel", "-u", USER, check=False)
        self.wait_for(lambda: not self.live_ids(), "the inst queue to empty", timeout=timeout, tick=0.2)

    wait_for = staticmethod(Cluster.wait_for)

    # ----------------------------------------------------------------- job ids of the two clusters
    def _throwaway(self, on_first: bool) -> int:
        """Submit and cancel one held job (no GPU) on the first or the inst cluster; the id it took."""
        name = "--job-name=id-align"
        if on_first:
            argv = ["sbatch", "--parsable", "--hold", name, *self.first.job_args(), "--wrap", "true"]
            env = {**os.environ, "SLURM_CONF": self.first.slurm_conf}
        else:
            argv = ["sbatch", "--parsable", "--hold", name, "--qos=inst-low", *self.job_args(), "--wrap", "true"]
            env = self.env()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, check=False)
        if out.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
        job_id = out.stdout.strip().split(";")[0]
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30, env=env, check=True)
        return int(job_id)

    def align_job_ids(self) -> int:
        """Make the next job id of the first and the inst cluster equal (throwaway held jobs, cancelled, on the
        one behind); returns that next id. Nothing else may submit meanwhile."""
        first, second = self._throwaway(on_first=True), self._throwaway(on_first=False)
        while first != second:
            if first < second:
                first = self._throwaway(on_first=True)
            else:
                second = self._throwaway(on_first=False)
        return first + 1

    # ----------------------------------------------------------------- faults
    def sshd_down(self) -> None:
        """Kill the inst sshd's listener and every session below it (its clients' master connections die too)."""
        _script(DEV_SSHD, "down", timeout=60)

    def sshd_up(self) -> None:
        """Start the inst sshd again, with the same keys."""
        _script(DEV_SSHD, "up")

    @contextlib.contextmanager
    def sshd_stopped(self) -> Iterator[None]:
        """The inst sshd down (listener and sessions) for the body of the ``with``, up again after it."""
        self.sshd_down()
        try:
            yield
        finally:
            self.sshd_up()

    def sshd_running(self) -> bool:
        """True if the inst sshd's listener runs and a login works."""
        proc = subprocess.run(
            [str(DEV_SSHD), "status"], capture_output=True, text=True, timeout=60, env=_profile_env(), check=False
        )
        return proc.returncode == 0


@pytest.fixture(scope="session")
def second_cluster(cluster: Cluster) -> Iterator[SecondCluster]:
    """The inst cluster and its sshd beside the first cluster, up for the session once a test asks; all its jobs
    cancelled, its sshd and cluster down at the end (unless FELLOWS_SLURM_KEEP=1)."""
    runtime = RUNTIME.parent / f"{RUNTIME.name}-{PROFILE}"
    try:
        _script(DEV_SLURM, "up", timeout=900)
        _script(DEV_SSHD, "up", timeout=600)
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"the second SLURM cluster did not come up: {exc}", pytrace=False)
    handle = SecondCluster(runtime, cluster)
    try:
        handle.empty_queue()
        yield handle
    finally:
        try:
            handle.empty_queue()
        finally:
            if os.environ.get("FELLOWS_SLURM_KEEP") != "1":
                subprocess.run(
                    [str(DEV_SSHD), "down"], capture_output=True, timeout=60, env=_profile_env(), check=False
                )
                subprocess.run(
                    [str(DEV_SLURM), "down"], capture_output=True, timeout=120, env=_profile_env(), check=False
                )


@pytest.fixture
def second_slurm(second_cluster: SecondCluster) -> Iterator[SecondCluster]:
    """The inst cluster for one test; every job this user left there is cancelled afterwards."""
    yield second_cluster
    second_cluster.empty_queue()
