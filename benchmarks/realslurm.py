"""Helpers for the benchmarks that use the local real SLURM (scripts/dev-slurm): job scripts, blockers, waits.

Callers hold the shared lock (``flock /tmp/fellows-slurm-tests.lock``) and have SLURM_CONF set; every job
made here is cancelled by the caller. Nothing here decides anything for a dispatch.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from fellows_fsm.scheduler.port import JobSpec

JOBS_DIR = Path(os.environ.get("FELLOWS_SLURM_RUNTIME", "/tmp/fellows-slurm")) / "jobs"


def script(seconds: float) -> str:
    """A bash job script that sleeps ``seconds``, in a fresh folder under the 1777 jobs dir."""
    folder = JOBS_DIR / f"bench-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    path = folder / "sleep.sh"
    path.write_text(f"#!/bin/bash\nsleep {seconds}\n")
    path.chmod(0o755)
    return str(path)


def job_args() -> tuple[str, ...]:
    """sbatch options every job needs here: a writable working dir and no output file."""
    return (f"--chdir={JOBS_DIR}", "--output=/dev/null")


def spec(name: str, gpus: int, seconds: float, *, time_limit: int = 600) -> JobSpec:
    """A JobSpec for a job sleeping ``seconds``."""
    return JobSpec(name=name, script=script(seconds), gpus=gpus, time_limit_seconds=time_limit, extra_args=job_args())


def sbatch(
    qos: str,
    gpus: int,
    seconds: float,
    *,
    user: str | None = None,
    name: str = "bench",
    time_limit: float | None = None,
) -> str:
    """Submit a plain job (as ``user`` if given, via runuser) and return its id; ``time_limit`` in seconds is
    rounded up to whole minutes (``--time``), as SLURM keeps it."""
    argv = [
        "sbatch",
        "--parsable",
        f"--qos={qos}",
        f"--gres=gpu:{gpus}",
        f"--job-name={name}",
        *job_args(),
        *([f"--time={math.ceil(time_limit / 60)}"] if time_limit is not None else []),
        script(seconds),
    ]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return out.strip().split(";")[0]


def state(job_id: str) -> str:
    """squeue's state word for a job ('' once squeue no longer shows it)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=False, capture_output=True, text=True
    ).stdout
    return out.strip()


def wait_state(job_ids: Sequence[str], wanted: str, timeout: float = 30.0, tick: float = 0.02) -> None:
    """Wait until every job reads ``wanted``."""
    end = time.monotonic() + timeout
    while not all(state(j) == wanted for j in job_ids):
        if time.monotonic() > end:
            raise RuntimeError(f"jobs {list(job_ids)} did not reach {wanted} in {timeout} s")
        time.sleep(tick)


def cancel(job_ids: Sequence[str]) -> None:
    """Cancel jobs outright (any state, any user: we are root)."""
    ids = [j for j in job_ids if j]
    if ids:
        subprocess.run(["scancel", *ids], check=False)


def live_ids() -> list[str]:
    """Every job pending, running or completing (every user)."""
    return subprocess.run(["squeue", "-h", "-o", "%i"], check=False, capture_output=True, text=True).stdout.split()


def wait_empty(timeout: float = 60.0) -> None:
    """Wait until the queue holds no pending, running or completing job."""
    end = time.monotonic() + timeout
    while live_ids():
        if time.monotonic() > end:
            raise RuntimeError(f"jobs {live_ids()} still in the queue after {timeout} s")
        time.sleep(0.2)
