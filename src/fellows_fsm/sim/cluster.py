"""A simulated SLURM cluster: a GPU pool, QoS tiers with priorities and per-user GPU caps, and its queue.

It implements the Scheduler port, so the real Router and Dispatch drive it exactly as they drive SLURM.
Scheduling is event-driven (a submit, a job end, a background arrival, a controller deadline); it never
reads the system clock and never decides anything for a dispatch. Its tiers and jobs are sim/jobs.py, the
backfill's start estimates sim/backfill.py (their names are re-exported here).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import attrs

from fellows_fsm.errors import ConfigError, QosRejected, SubmitRejected
from fellows_fsm.scheduler.port import FinishedJob, JobSpec, Observation, PendingJob, Phase, RunningJob, Workload
from fellows_fsm.sim.backfill import plan_starts
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.sim.jobs import FELLOWS_TIERS, SimJob, Tier
from fellows_fsm.sim.trace import BACKGROUND_QOS, ME, TraceJob

__all__ = ["SimCluster"]


def _drop_at(job: SimJob) -> float:
    """When slurmctld drops a pending job with ``--deadline``: once it can no longer end by the deadline.

    SLURM keeps time limits in whole minutes (``--time`` is rounded up), so a deadline less than the rounded
    limit away drops the job at its first scheduling pass, as measured on the local SLURM 22.05.
    """
    assert job.deadline is not None
    if job.time_limit is None:
        return job.deadline
    return job.deadline - 60.0 * math.ceil(job.time_limit / 60.0)


class SimCluster:
    """One simulated SLURM cluster of ``gpus`` GPUs, implementing the Scheduler port for user ``user``.

    Every event (submit, end, arrival, deadline, cancel) is followed by a scheduling pass: pending jobs in
    QoS-priority order (then submit order) start if they fit under their QoS's per-user GPU cap and in the
    free GPUs; a job that does not fit is skipped (an ideal backfill: no reservations). Pending reasons
    are SLURM's: QOSMaxGRESPerUser, QOSMaxWallDurationPerJobLimit, Resources (the first job the free GPUs
    cannot hold), Priority (those behind it).

    A pending job's start estimate (squeue's StartTime) is computed as SLURM's backfill scheduler computes it
    (sim/backfill.py); it comes with the observe: no extra call.
    """

    def __init__(
        self,
        clock: SimClock,
        *,
        gpus: int,
        tiers: Sequence[Tier] = FELLOWS_TIERS,
        user: str = ME,
        durations: Mapping[str, float] | None = None,
    ) -> None:
        if gpus < 1:
            raise ConfigError(f"gpus={gpus!r}: a cluster needs at least one GPU")
        self.clock = clock
        self.gpus = gpus
        self.tiers = {t.name: t for t in tiers}
        self.user = user
        self.durations: dict[str, float] = dict(durations or {})
        """How long my jobs run once started, by JobSpec.script (else the job's time limit)."""
        self.jobs: dict[str, SimJob] = {}
        self.calls: Counter[str] = Counter()
        self._pending: dict[str, SimJob] = {}
        self._running: dict[str, SimJob] = {}
        self._used_total = 0
        self._used: Counter[tuple[str, str]] = Counter()
        self._ends: list[tuple[float, int, str]] = []
        self._deadlines: list[tuple[float, int, str]] = []
        self._arrivals: tuple[TraceJob, ...] = ()
        self._next_arrival = 0
        self._next_id = 1
        self._next_seq = 0
        self._version = 0
        """Bumped by every scheduling pass: the start estimates are recomputed only after one."""
        self._planned: tuple[int, int] = (-1, -1)
        """The pass and the number of pending jobs planned for when the estimates were last computed."""

    # ----------------------------------------------------------------- the port
    def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        """Queue one of my jobs on ``qos`` and schedule at once; an unknown QoS is refused like sbatch does."""
        self.calls["submit"] += 1
        if qos not in self.tiers:
            raise QosRejected(qos, f"sbatch: error: Batch job submission failed: Invalid qos specification ({qos})")
        duration = self.durations.get(spec.script)
        if duration is None:
            if spec.time_limit_seconds is None:
                raise SubmitRejected(f"simulated job {spec.name!r} has neither a known duration nor a time limit")
            duration = float(spec.time_limit_seconds)
        limit = None if spec.time_limit_seconds is None else float(spec.time_limit_seconds)
        job = self._queue(self.user, qos, spec.gpus, duration, time_limit=limit, token=token, deadline=deadline)
        self.schedule()
        return job.job_id

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        """Every listed job in one call (one squeue); an id the cluster never had maps to UNKNOWN."""
        self.calls["observe"] += 1
        return self._read(job_ids)

    def cancel_if_pending(self, job_ids: Sequence[str], *, read_back: bool = True) -> Mapping[str, Observation]:
        """Cancel the jobs that are still pending (a running job is left running), then read them back.

        Without ``read_back`` the result is what the SLURM port's cancel itself proves (slurm/port.py:
        ``SlurmScheduler.cancel_if_pending``): each job that was pending and is cancelled is GONE, so its dispatch
        moves on in the same tick; a job that had started (or ended) is left out, for the next observe."""
        self.calls["cancel_if_pending"] += 1
        proved: dict[str, Observation] = {}
        for job_id in job_ids:
            job = self._pending.pop(job_id, None)
            if job is not None:
                job.state, job.reason = "CANCELLED", None
                proved[job_id] = Observation(job_id, Phase.GONE, state="CANCELLED")
        self.schedule()
        return self._read(job_ids) if read_back else proved

    def change_qos(self, job_id: str, qos: str) -> bool:
        """Move a pending job to ``qos`` keeping its id, like ``scontrol update``; False once it is not pending."""
        self.calls["change_qos"] += 1
        if qos not in self.tiers:
            raise QosRejected(qos, f"scontrol: error: Invalid qos specification ({qos})")
        job = self._pending.get(job_id)
        if job is None:
            return False
        job.qos, job.reason = qos, None
        self.schedule()
        return True

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel the jobs whatever their state (a user withdrawing a dispatch)."""
        self.calls["cancel"] += 1
        for job_id in job_ids:
            job = self._pending.pop(job_id, None)
            if job is not None:
                job.state, job.reason = "CANCELLED", None
            running = self._running.pop(job_id, None)
            if running is not None:
                running.state, running.end_time = "CANCELLED", self.clock.now()
                self._used_total -= running.gpus
                self._used[(running.user, running.qos)] -= running.gpus
        self.schedule()

    def find_by_token(self, token: str) -> Observation | None:
        """The newest job tagged with ``token``, or None."""
        self.calls["find_by_token"] += 1
        tagged = [j for j in self.jobs.values() if j.token == token]
        return tagged[-1].observe() if tagged else None

    def find_tokens(self, prefix: str) -> list[Observation]:
        """Every pending or running job whose token starts with ``prefix``."""
        self.calls["find_tokens"] += 1
        live = ("PENDING", "RUNNING")
        return [j.observe() for j in self.jobs.values() if j.token.startswith(prefix) and j.state in live]

    def workload(self, *, since: float) -> Workload:
        """The trace's jobs that ended on their own since ``since`` (elapsed, limit), the running ones, the GPUs.

        Every user's jobs are visible (no PrivateData); a job without a time limit is left out of the finished ones.
        """
        self.calls["history"] += 1
        finished = [
            FinishedJob(job.end_time - job.start_time, job.time_limit)
            for job in self.jobs.values()
            if job.state == "COMPLETED"
            and job.time_limit
            and job.start_time is not None
            and job.end_time is not None
            and job.end_time >= since
        ]
        running = [
            RunningJob(job.job_id, job.gpus, job.start_time, job.time_limit)
            for job in self._running.values()
            if job.start_time is not None
        ]
        pending = [
            PendingJob(
                job.job_id, job.gpus, float(self.tiers[job.qos].priority), job.qos, job.reason, job.user == self.user
            )
            for job in self._pending.values()
        ]
        now = self.clock.now()
        return Workload(now, finished, running, pending, total_gpus=self.gpus, used_gpus=self._used_total)

    def _read(self, job_ids: Sequence[str]) -> dict[str, Observation]:
        self._estimate(job_ids)
        return {
            job_id: self.jobs[job_id].observe() if job_id in self.jobs else Observation(job_id, Phase.UNKNOWN)
            for job_id in job_ids
        }

    # ----------------------------------------------------------------- workload and time
    def set_arrivals(self, jobs: Iterable[TraceJob], *, origin: float) -> None:
        """The background jobs (every user but me), queued at ``origin + submit_at`` as time passes."""
        others = sorted((j for j in jobs if not j.mine), key=lambda j: (j.submit_at, j.index))
        self._arrivals = tuple(attrs.evolve(j, submit_at=origin + j.submit_at) for j in others)
        self._next_arrival = 0

    def queue_background(self, job: TraceJob) -> SimJob:
        """Queue a background job now, without scheduling (the caller schedules)."""
        return self._queue(job.user, job.qos or BACKGROUND_QOS, job.gpus, job.duration, time_limit=job.limit)

    def next_event_time(self) -> float | None:
        """When the next job end, background arrival or controller deadline happens, or None."""
        times = []
        if self._ends:
            times.append(self._ends[0][0])
        if self._deadlines:
            times.append(self._deadlines[0][0])
        if self._next_arrival < len(self._arrivals):
            times.append(self._arrivals[self._next_arrival].submit_at)
        return min(times) if times else None

    def advance_to(self, when: float) -> None:
        """Play every event up to and including ``when`` in time order, then set the clock to ``when``."""
        while True:
            at = self.next_event_time()
            if at is None or at > when:
                break
            self.clock.advance_to(max(at, self.clock.now()))
            self._play_events(at)
        self.clock.advance_to(max(when, self.clock.now()))

    def run_until_started(self, job_id: str, limit: float) -> float | None:
        """Play events until ``job_id`` starts (its start time) or the next event is past ``limit`` (None)."""
        job = self.jobs[job_id]
        while job.start_time is None:
            if job.state != "PENDING":
                return None
            at = self.next_event_time()
            if at is None or at > limit:
                return None
            self.advance_to(at)
        return job.start_time

    def fork(self) -> SimCluster:
        """An independent copy of the live state (pending and running jobs, arrivals still to come)."""
        twin = SimCluster(SimClock(self.clock.now()), gpus=self.gpus, tiers=tuple(self.tiers.values()), user=self.user)
        twin.durations = self.durations
        twin._arrivals, twin._next_arrival = self._arrivals, self._next_arrival
        twin._next_id, twin._next_seq = self._next_id, self._next_seq
        for job in [*self._running.values(), *self._pending.values()]:
            copy = attrs.evolve(job)
            twin.jobs[copy.job_id] = copy
            if copy.state == "PENDING":
                twin._pending[copy.job_id] = copy
                if copy.deadline is not None:
                    heapq.heappush(twin._deadlines, (_drop_at(copy), copy.seq, copy.job_id))
            else:
                twin._running[copy.job_id] = copy
                twin._used_total += copy.gpus
                twin._used[(copy.user, copy.qos)] += copy.gpus
                assert copy.end_time is not None
                heapq.heappush(twin._ends, (copy.end_time, copy.seq, copy.job_id))
        twin._pending = dict(sorted(twin._pending.items(), key=lambda kv: kv[1].seq))
        return twin

    def queue_mine(self, job: TraceJob, qos: str) -> SimJob:
        """Queue one of my jobs straight on ``qos`` (the oracle's placement, no dispatch) and schedule."""
        limit = 60.0 * math.ceil(job.limit / 60.0)
        queued = self._queue(self.user, qos, job.gpus, job.duration, time_limit=limit)
        self.schedule()
        return queued

    @property
    def used_gpus(self) -> int:
        """GPUs running jobs now."""
        return self._used_total

    # ----------------------------------------------------------------- the controller
    def schedule(self) -> None:
        """Start every pending job that fits, highest QoS priority first; set the others' reasons."""
        self._version += 1
        blocked_by_resources = False
        order = sorted(self._pending.values(), key=self._priority_key)
        now = self.clock.now()
        for job in order:
            if job.deadline is not None and _drop_at(job) <= now:
                del self._pending[job.job_id]
                job.state, job.reason = "DEADLINE", None
                continue
            tier = self.tiers[job.qos]
            if (
                tier.max_wall_seconds is not None
                and job.time_limit is not None
                and job.time_limit > tier.max_wall_seconds
            ):
                job.reason = "QOSMaxWallDurationPerJobLimit"
                continue
            cap = tier.max_gpus_per_user
            if cap is not None and self._used[(job.user, job.qos)] + job.gpus > cap:
                job.reason = "QOSMaxGRESPerUser"
                continue
            if self._used_total + job.gpus > self.gpus:
                job.reason = "Priority" if blocked_by_resources else "Resources"
                blocked_by_resources = True
                continue
            self._start(job, now)

    def _estimate(self, job_ids: Sequence[str]) -> None:
        """Fill in the start estimate of the pending jobs, in priority order, up to the last of ``job_ids``
        (backfill.py's plan), recomputed only after a scheduling pass, since nothing else changes the plan."""
        wanted = {j for j in job_ids if j in self._pending}
        if not wanted:
            return
        order = sorted(self._pending.values(), key=self._priority_key)
        last = max(i for i, job in enumerate(order) if job.job_id in wanted)
        if self._planned >= (self._version, last + 1):
            return
        self._planned = (self._version, last + 1)
        plan_starts(
            order[: last + 1],
            self._running.values(),
            self.tiers,
            now=self.clock.now(),
            gpus=self.gpus,
            used_gpus=self._used_total,
        )

    def _priority_key(self, job: SimJob) -> tuple[int, float, int]:
        return (-self.tiers[job.qos].priority, job.submitted_at, job.seq)

    def _start(self, job: SimJob, now: float) -> None:
        del self._pending[job.job_id]
        job.state, job.reason, job.start_time = "RUNNING", None, now
        job.end_time = now + job.duration
        self._running[job.job_id] = job
        self._used_total += job.gpus
        self._used[(job.user, job.qos)] += job.gpus
        heapq.heappush(self._ends, (job.end_time, job.seq, job.job_id))

    def _queue(
        self,
        user: str,
        qos: str,
        gpus: int,
        duration: float,
        *,
        time_limit: float | None,
        token: str = "",
        deadline: float | None = None,
    ) -> SimJob:
        if qos not in self.tiers:
            raise ConfigError(f"QoS {qos!r} is not a tier of the simulated cluster ({', '.join(self.tiers)})")
        self._next_id += 1
        self._next_seq += 1
        job = SimJob(
            job_id=str(self._next_id - 1),
            user=user,
            qos=qos,
            gpus=gpus,
            duration=duration,
            submitted_at=self.clock.now(),
            seq=self._next_seq - 1,
            time_limit=time_limit,
            token=token,
            deadline=deadline,
        )
        self.jobs[job.job_id] = job
        self._pending[job.job_id] = job
        if deadline is not None:
            heapq.heappush(self._deadlines, (_drop_at(job), job.seq, job.job_id))
        return job

    def _play_events(self, at: float) -> None:
        """Every event at time ``at``: job ends, controller deadlines, arrivals; then one scheduling pass."""
        while self._ends and self._ends[0][0] <= at:
            _, _, job_id = heapq.heappop(self._ends)
            job = self._running.pop(job_id, None)
            if job is None:
                continue  # cancelled while running: its GPUs were given back then
            job.state = "COMPLETED"
            self._used_total -= job.gpus
            self._used[(job.user, job.qos)] -= job.gpus
        while self._deadlines and self._deadlines[0][0] <= at:
            _, _, job_id = heapq.heappop(self._deadlines)
            pending = self._pending.pop(job_id, None)
            if pending is not None:
                pending.state, pending.reason = "DEADLINE", None
        while self._next_arrival < len(self._arrivals) and self._arrivals[self._next_arrival].submit_at <= at:
            self.queue_background(self._arrivals[self._next_arrival])
            self._next_arrival += 1
        self.schedule()
