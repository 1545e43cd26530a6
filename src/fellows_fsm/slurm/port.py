"""SlurmScheduler: the Scheduler port implemented with the real SLURM commands (sbatch, squeue, sacct, ...).

It turns port calls into commands and command output into Observations and errors from errors.py; it knows
nothing of the lifecycle's states, never decides a transition, and never cancels a job it has not just
fenced as pending (a job that started first is left running: the late start wins).
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from fellows_fsm.core.dispatch import SLOW_SUBMIT_SECONDS
from fellows_fsm.errors import QosRejected, SchedulerError, SchedulerUnreachable, SubmitRejected, UsageError
from fellows_fsm.scheduler.port import JobSpec, Observation, Phase, Workload
from fellows_fsm.scheduler.script import read_script_defaults
from fellows_fsm.slurm.observe import JobRow, Observer, parse_squeue, squeue_argv
from fellows_fsm.slurm.pace import SubmitPace
from fellows_fsm.slurm.render import LaneOptions, render_sbatch
from fellows_fsm.slurm.runner import ONE_ATTEMPT, CommandRunner
from fellows_fsm.slurm.workload import read_workload

__all__ = ["SlurmScheduler", "parse_sbatch_id", "parse_version"]

log = logging.getLogger(__name__)

INVALID_QOS = "Invalid qos specification"
NOT_PENDING = "Job is no longer pending execution"
ALREADY_FINISHED = "Job has already finished"
INVALID_JOB_ID = "Invalid job id specified"
_GONE_ALREADY = (ALREADY_FINISHED, INVALID_JOB_ID, "already completing")
# scancel filters --state inside slurmctld with --ctld from 23.11, but SLURM's NEWS puts the fix of a single
# filtered cancel in 23.11.6: before that patch level the client-side filter (after a fence) is used.
CTLD_CANCEL_VERSION = (23, 11, 6)
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
# A begin time far enough ahead that a fenced job cannot start before the cancel that follows it.
_FENCE_BEGIN = "now+365days"
_ERROR_PREFIX = re.compile(r"^\S+: error: ")
_FOR_JOB = re.compile(r"for job (?P<job>\d+(?:_\d+)?)\s*$")
_KILL_ERROR = re.compile(r"Kill job error on job id (?P<job>\d+(?:_\d+)?):")
_SCRIPT_MAX_BYTES = 4 * 1024 * 1024  # sbatch's own limit on a batch script
_RUNNING = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING"})
_PROMPT_SECONDS = SLOW_SUBMIT_SECONDS
"""A listing answered within this is believed by the lookups after it in the same tick: a slower one came from a
stalled controller that may still queue a lost sbatch after it (as a slow sbatch is one held up: core/dispatch.py)."""


def parse_sbatch_id(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` output (``<id>`` or ``<id>;<cluster>``)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    job_id = lines[-1].split(";", 1)[0].strip() if lines else ""
    if not _JOB_ID.match(job_id):
        raise SchedulerError(f"sbatch --parsable printed {stdout!r}, which holds no job id")
    return job_id


def parse_version(text: str) -> tuple[int, int, int]:
    """``(major, minor, patch)`` from ``slurm-wlm 22.05.8`` / ``slurm 23.11.6``; ``(0, 0, 0)`` if none is found.

    A missing patch level reads as 0, so a gate at an exact patch level never passes on a guess.
    """
    match = _VERSION.search(text)
    return (int(match[1]), int(match[2]), int(match[3] or 0)) if match else (0, 0, 0)


def _current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


class SlurmScheduler:
    """The Scheduler port on a real SLURM cluster; every call goes through one CommandRunner.

    ``runner.calls`` counts commands, so callers can check that one observe is one squeue. When the runner's
    transport is remote (ssh), the script's content travels with the sbatch on stdin, the job's working dir is
    the script's ``#SBATCH --chdir`` (or ``--chdir`` in its sbatch options), else ``remote_workdir``, else the
    login directory sbatch starts in on the host; ``user`` is the login's user there (``id -un``, asked once).
    """

    def __init__(
        self,
        runner: CommandRunner | None = None,
        *,
        user: str | None = None,
        observer: Observer | None = None,
        remote_workdir: str | None = None,
        options: LaneOptions | None = None,
        submits_per_second: float | None = None,
    ) -> None:
        self.runner = runner or CommandRunner()
        self.pace = SubmitPace(submits_per_second) if submits_per_second else None
        """sbatch calls paced to the lane's ``max_submits_per_second`` (slurm/pace.py); None: not paced."""
        self.options = options or LaneOptions()
        """What this cluster's lane sets on every sbatch: partition, account, how GPUs are asked for."""
        self._user = user
        self.remote_workdir = remote_workdir
        self.observer = observer or Observer(self.runner)
        self._ctld_cancel: bool | None = None
        self._lookups_due = False
        """An sbatch reply was lost: the next observe lists every job of the user, for the lookups after it."""
        self._listing: dict[str, JobRow] | None = None
        self._booked: dict[str, JobRow] | None = None
        """This tick's listing of the user's jobs (squeue; sacct) that the lost submits' lookups share: taken by the
        observe or by the first lookup, forgotten at the next observe, submit or cancel (never older than the tick)."""
        self.last_notes: tuple[str, ...] = ()
        """User-facing notes from the latest submit's render (e.g. an #SBATCH --qos line overridden)."""

    @property
    def user(self) -> str:
        """The user whose jobs and grants these are: here the process's, over ssh the login's (asked once)."""
        if self._user is None:
            if self.runner.transport.remote:
                found = self.runner.run(("id", "-un"))
                name = found.stdout.strip()
                if not found.ok or not name:
                    raise SchedulerError(f"`id -un` {self.runner.transport.where} failed: {found.message}")
                self._user = name
            else:
                self._user = _current_user()
        return self._user

    # ----------------------------------------------------------------- the port
    def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        """``sbatch --parsable`` on rung ``qos`` with the dispatch token as the job's comment; return the id.

        Here it runs in ``spec.workdir`` (where submit was run), as the user's own sbatch would.

        Never retried after a lost reply (the job may exist): the caller looks the token up instead.
        """
        command = render_sbatch(spec, qos=qos, token=token, deadline=deadline, lane=self.options)
        for note in command.notes:
            log.info("%s", note)
        self.last_notes = command.notes
        argv, stdin, cwd = command.argv, None, spec.workdir
        if self.runner.transport.remote:
            argv, stdin = self._remote_submit(spec, argv)
            cwd = None
        elif cwd is not None and not os.path.isdir(cwd):
            raise SubmitRejected(
                f"job {spec.name!r} was submitted from {cwd}, which is no longer a directory here; sbatch runs "
                "there (a job with no --chdir runs in it): restore it, or cancel the dispatch and submit again"
            )
        if self.pace is not None:
            self.pace.wait()
        self._forget_listing()
        try:
            result = self.runner.run(argv, idempotent=False, stdin=stdin, cwd=cwd)
        except SchedulerUnreachable as exc:
            self._lookups_due = self._lookups_due or exc.delivered  # its job may exist: looked up next tick
            raise
        if result.ok:
            return parse_sbatch_id(result.stdout)
        words = _slurm_words(result.stderr or result.stdout)
        if INVALID_QOS in words:
            raise QosRejected(qos, f"SLURM refused QoS {qos!r} for {spec.script}: {words}")
        raise SubmitRejected(f"sbatch refused job {spec.name!r} (script {spec.script}): {words}")

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        """Every listed job from one squeue (one sacct for ids squeue no longer knows); unknown -> UNKNOWN. After a
        lost sbatch reply that squeue lists every job of the user, and this tick's lookups read it (one squeue a
        poll, however many replies were lost)."""
        self._forget_listing()
        if not self._lookups_due:
            return self.observer.observe(job_ids)
        t0 = time.monotonic()
        seen = self.observer.observe(job_ids, user=self.user)
        if self.observer.listed is not None:
            self._lookups_due = False
            if time.monotonic() - t0 <= _PROMPT_SECONDS:
                self._listing = self.observer.listed
        return seen

    def cancel_if_pending(self, job_ids: Sequence[str], *, read_back: bool = True) -> Mapping[str, Observation]:
        """Cancel each job only while it is pending (one scancel for all); with ``read_back``, one observe.

        Before 23.11.6 scancel filters ``--state=PENDING`` in the client, so a job may start between its look
        and its kill. The jobs are first fenced inside slurmctld by one begin-time update, which slurmctld
        applies only to a pending job (a running one is refused with "no longer pending"), so a fenced job
        cannot start before the cancel lands. From 23.11.6 ``scancel --ctld`` applies the filter in slurmctld.

        Without ``read_back`` the result holds only what the cancel itself proves: a job the fence held and
        scancel then removed is GONE (it cannot have started in between); with ``--ctld``, a job slurmctld's own
        filter did not name as spared. Any other job is left out; the caller's next observe is its read-back (a
        job that started before its cancel landed reads STARTED).
        """
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        self._forget_listing()
        confirmed: dict[str, Observation] = {}
        # One attempt each: a controller that does not answer gets the cancels again at the next poll.
        if self._scancel_has_ctld():
            done = self.runner.run(("scancel", "--ctld", "--state=PENDING", *ids), retry=ONE_ATTEMPT)
            spared, certain = _spared_by_ctld_filter(done.stderr)
            if done.ok and certain:
                # slurmctld applied the filter itself: every id it did not name was pending and is cancelled. An id
                # it does not know is not named either, so the caller trusts this only for jobs it saw pending
                # this very poll (a job cannot start, end and be purged in between).
                confirmed = {j: Observation(j, Phase.GONE, state="CANCELLED") for j in ids if j not in spared}
        else:
            fenced, certain = self._fence(ids)
            if fenced:
                done = self.runner.run(("scancel", "--state=PENDING", *fenced), retry=ONE_ATTEMPT)
                if done.ok and certain:
                    confirmed = {j: Observation(j, Phase.GONE, state="CANCELLED") for j in fenced}
        return self.observe(ids) if read_back else confirmed

    def cancel(self, job_ids: Sequence[str]) -> None:
        """``scancel`` the jobs whatever their state; jobs already ended or purged are not an error."""
        if not job_ids:
            return
        self._forget_listing()
        result = self.runner.run(("scancel", *job_ids))
        words = _slurm_words(result.stderr or result.stdout)
        if not result.ok and not any(gone in words for gone in _GONE_ALREADY):
            raise SchedulerError(f"scancel {' '.join(job_ids)} failed: {words}")

    def find_by_token(self, token: str) -> Observation | None:
        """The newest job of this user commented ``token``: squeue first, then sacct for purged jobs. The lookups of
        one tick share one listing of each (``_listing``): a burst of lost replies costs one squeue, not one each."""
        rows = self._listing
        if rows is None:
            t0 = time.monotonic()
            result = self.runner.run(squeue_argv(user=self.user))
            rows = parse_squeue(result.stdout) if result.ok else {}
            if result.ok and time.monotonic() - t0 <= _PROMPT_SECONDS:
                self._listing = rows
        tagged = [row for row in rows.values() if row.comment == token]
        if not tagged:
            # sacct reports comments only where slurmdbd stores them (AccountingStoreFlags=job_comment).
            booked = self._booked
            if booked is None:
                booked = self.observer.sacct_rows(user=self.user)
                self._booked = booked if self._listing is not None else None
            tagged = [row for row in booked.values() if row.comment == token]
        if not tagged:
            return None
        newest = max(tagged, key=lambda row: _id_key(row.job_id))
        return newest.observation

    def _forget_listing(self) -> None:
        self._listing = self._booked = None

    def find_tokens(self, prefix: str) -> list[Observation]:
        """Every pending or running job of this user whose comment starts with ``prefix``: one squeue (a job that
        already ended is no one's to cancel). An unanswered squeue raises, never reads as none."""
        result = self.runner.run(squeue_argv(user=self.user))
        if not result.ok:
            raise SchedulerError(f"squeue of {self.user}'s jobs failed: {result.message}")
        seen = [r.observation for r in parse_squeue(result.stdout).values() if (r.comment or "").startswith(prefix)]
        return [o for o in seen if o.phase is Phase.PENDING or o.state.split(" ", 1)[0] in _RUNNING]

    # ----------------------------------------------------------------- beyond the protocol
    def workload(self, *, since: float) -> Workload:
        """The cluster's finished jobs since ``since``, its running jobs and its GPUs (slurm/history.py:
        ``read_workload``: one sacct, one squeue, one scontrol); never called per poll."""
        return read_workload(self.runner, user=self.user, since=since, now=time.time())

    def change_qos(self, job_id: str, qos: str) -> bool:
        """Move a pending job to ``qos`` keeping its id: True if done, False if it is no longer pending.

        slurmctld decides (a compare-and-set): a job that has started is refused. Raises QosRejected for
        a QoS SLURM refuses, SchedulerError for any other refusal.
        """
        self._forget_listing()
        result = self.runner.run(("scontrol", "update", f"jobid={job_id}", f"qos={qos}"))
        if result.ok:
            return True
        words = _slurm_words(result.stderr or result.stdout)
        if NOT_PENDING in words or ALREADY_FINISHED in words:
            return False
        if INVALID_QOS in words:
            raise QosRejected(qos, f"SLURM refused to move job {job_id} to QoS {qos!r}: {words}")
        raise SchedulerError(f"scontrol could not move job {job_id} to QoS {qos!r}: {words}")

    def scancel_version(self) -> tuple[int, int, int]:
        """The ``(major, minor, patch)`` version of the scancel on PATH."""
        result = self.runner.run(("scancel", "--version"))
        return parse_version(result.stdout or result.stderr)

    # ----------------------------------------------------------------- helpers
    def _remote_submit(self, spec: JobSpec, argv: tuple[str, ...]) -> tuple[tuple[str, ...], bytes]:
        """The sbatch argv without the local script path (sbatch reads the script on stdin), and the script's bytes.

        A working dir comes from the script or its sbatch options, else ``remote_workdir``: never a local path.
        """
        path = Path(spec.script_file)
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"script {spec.script} cannot be read here ({exc.strerror})") from None
        if len(content) > _SCRIPT_MAX_BYTES:
            raise UsageError(f"script {spec.script} is over sbatch's 4 MB limit; make it smaller")
        head = list(argv[:-1])  # the script path comes last (render_sbatch)
        chosen = any(a == "-D" or a.startswith(("--chdir", "-D")) for a in spec.extra_args)
        if not chosen and read_script_defaults(path).chdir is None and self.remote_workdir is not None:
            head.insert(2, f"--chdir={self.remote_workdir}")
        return tuple(head), content

    def _scancel_has_ctld(self) -> bool:
        if self._ctld_cancel is None:
            self._ctld_cancel = self.scancel_version() >= CTLD_CANCEL_VERSION
        return self._ctld_cancel

    def _fence(self, job_ids: list[str]) -> tuple[list[str], bool]:
        """Stop the pending ones of ``job_ids`` from starting, in slurmctld; return the ids to cancel, and whether
        every one of them is surely fenced (False when slurmctld said something this does not understand).

        slurmctld answers per job ("... for job N"): a job no longer pending, finished or unknown is left out.
        """
        result = self.runner.run(
            ("scontrol", "update", f"jobid={','.join(job_ids)}", f"StartTime={_FENCE_BEGIN}"), retry=ONE_ATTEMPT
        )
        if result.ok:
            return job_ids, True
        refused: set[str] = set()
        unexplained: list[str] = []
        for line in (result.stderr or result.stdout).splitlines():
            match = _FOR_JOB.search(line)
            if match is None:
                if line.strip():
                    unexplained.append(line.strip())
                continue
            if any(word in line for word in (NOT_PENDING, ALREADY_FINISHED, INVALID_JOB_ID)):
                refused.add(match["job"])
            else:
                unexplained.append(line.strip())
        if unexplained:
            # E.g. a site that forbids begin-time updates: fall back to scancel's own (client-side) filter.
            log.warning("scontrol could not fence jobs %s (%s); cancelling with scancel's filter", job_ids, unexplained)
        return [job_id for job_id in job_ids if job_id not in refused], not unexplained


def _spared_by_ctld_filter(stderr: str) -> tuple[set[str], bool]:
    """The ids ``scancel --ctld --state=PENDING`` left alone, from its per-job error lines, and whether every line
    was such a line (measured on 24.11: "scancel: error: Kill job error on job id 2: Job state RUNNING != filter
    state PENDING: Cannot signal job", exit 0)."""
    spared: set[str] = set()
    certain = True
    for line in stderr.splitlines():
        match = _KILL_ERROR.search(line)
        if match is not None:
            spared.add(match["job"])
        elif line.strip():
            certain = False
    return spared, certain


def _slurm_words(text: str) -> str:
    """SLURM's error lines joined into one (sbatch may split one message over several ``error:`` lines)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "no message"
    prefix = _ERROR_PREFIX.match(lines[0])
    if prefix is None:
        return " ".join(lines)
    rest = [line.removeprefix(prefix[0]) for line in lines[1:]]
    return " ".join([lines[0], *rest])


def _id_key(job_id: str) -> tuple[int, int]:
    head, _, tail = job_id.partition("_")
    return (int(head) if head.isdigit() else -1, int(tail) if tail.isdigit() else -1)
