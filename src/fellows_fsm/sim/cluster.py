"""A simulated SLURM cluster: a GPU pool, QoS tiers with priorities and per-user GPU caps, and its queue.

It implements the Scheduler port, so the real Router and Dispatch drive it exactly as they drive SLURM.
Scheduling is event-driven (a submit, a job end, a background arrival, a controller deadline); it never
reads the system clock and never decides anything for a dispatch.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import attrs

from fellows_fsm.errors import ConfigError, QosRejected, SubmitRejected
from fellows_fsm.scheduler import FinishedJob, History, JobSpec, Observation, PendingJob, Phase, RunningJob
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.sim.trace import BACKGROUND_QOS, ME, TraceJob

__all__ = ["FELLOWS_TIERS", "SimCluster", "SimJob", "Tier", "parse_tier"]

_DAY = 86_400
BACKFILL_WINDOW_SECONDS = float(_DAY)
"""How far ahead the backfill scheduler plans (SLURM's bf_window, 1 day by default): a job it cannot place
within it shows no start estimate (N/A)."""


@attrs.frozen
class Tier:
    """One QoS: its priority, its per-user GPU cap (None: no cap) and its MaxWall (None: none)."""

    name: str
    priority: int
    max_gpus_per_user: int | None = None
    max_wall_seconds: int | None = None


FELLOWS_TIERS = (
    Tier("high-eur", 100_000, 16, 7 * _DAY),
    Tier("normal-eur", 50_000, 16, 7 * _DAY),
    Tier("low-eur", 10_000, None, 14 * _DAY),
    Tier("dev-eur", 200_000, 8, 1 * _DAY),
)
"""The fellows tiers as scripts/dev-slurm creates them (see /work/shared/slurm-lab.md)."""


def parse_tier(text: str) -> Tier:
    """A tier from ``NAME:PRIORITY:CAP`` (CAP ``-`` for no per-user GPU cap), e.g. ``high-eur:100000:16``."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not (parts[2] == "-" or parts[2].isdigit()):
        raise ConfigError(f"tier {text!r} is not NAME:PRIORITY:CAP, e.g. 'high-eur:100000:16' or 'low-eur:10000:-'")
    return Tier(parts[0], int(parts[1]), None if parts[2] == "-" else int(parts[2]))


def _drop_at(job: SimJob) -> float:
    """When slurmctld drops a pending job with ``--deadline``: once it can no longer end by the deadline.

    SLURM keeps time limits in whole minutes (``--time`` is rounded up), so a deadline less than the rounded
    limit away drops the job at its first scheduling pass, as measured on the local SLURM 22.05.
    """
    assert job.deadline is not None
    if job.time_limit is None:
        return job.deadline
    return job.deadline - 60.0 * math.ceil(job.time_limit / 60.0)


# Mutable on purpose: a job moves from PENDING to RUNNING to COMPLETED as simulated time passes.
@attrs.define(eq=False)
class SimJob:
    """One job in the simulated queue."""

    job_id: str
    user: str
    qos: str
    gpus: int
    duration: float
    submitted_at: float
    seq: int
    """Submission order, the tie-break after priority and submit time."""
    time_limit: float | None = None
    token: str = ""
    deadline: float | None = None
    state: str = "PENDING"
    reason: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    expected_start: float | None = None
    """The backfill scheduler's start estimate while pending (set by SimCluster when the job is observed)."""

    def observe(self) -> Observation:
        """This job as squeue would report it."""
        if self.state == "PENDING":
            phase = Phase.PENDING
        elif self.start_time is not None:
            phase = Phase.STARTED
        else:
            phase = Phase.GONE
        return Observation(
            job_id=self.job_id,
            phase=phase,
            state=self.state,
            reason=self.reason if self.state == "PENDING" else None,
            qos=self.qos,
            start_time=self.start_time,
            expected_start=self.expected_start if self.state == "PENDING" else None,
        )


class SimCluster:
    """One simulated SLURM cluster of ``gpus`` GPUs, implementing the Scheduler port for user ``user``.

    Every event (submit, end, arrival, deadline, cancel) is followed by a scheduling pass: pending jobs in
    QoS-priority order (then submit order) start if they fit under their QoS's per-user GPU cap and in the
    free GPUs; a job that does not fit is skipped (an ideal backfill: no reservations). Pending reasons
    are SLURM's: QOSMaxGRESPerUser, QOSMaxWallDurationPerJobLimit, Resources (the first job the free GPUs
    cannot hold), Priority (those behind it).

    A pending job's start estimate (squeue's StartTime) is computed as SLURM's backfill scheduler computes it:
    from time limits, not from the real durations (so it errs late when limits exceed durations), placing the
    pending jobs in priority order at the earliest time their GPUs and their QoS's per-user cap allow, each
    with a reservation, up to BACKFILL_WINDOW_SECONDS ahead. It comes with the observe: no extra call.
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
        """Cancel the jobs that are still pending (a running job is left running), then read them back."""
        self.calls["cancel_if_pending"] += 1
        for job_id in job_ids:
            job = self._pending.pop(job_id, None)
            if job is not None:
                job.state, job.reason = "CANCELLED", None
        self.schedule()
        return self._read(job_ids) if read_back else {}

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

    def history(self, *, since: float) -> History:
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
        return History(now, finished, running, pending, total_gpus=self.gpus, used_gpus=self._used_total)

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
        """Fill in the start estimate of the pending jobs, in priority order, up to the last of ``job_ids``.

        The backfill's plan: running jobs end at their start plus their time limit (a job without one never
        ends); each pending job, highest priority first, is reserved at the earliest time from now on when both
        the free GPUs and its QoS's per-user cap hold it for its whole time limit. Recomputed only after a
        scheduling pass, since nothing else changes the plan.
        """
        wanted = {j for j in job_ids if j in self._pending}
        if not wanted:
            return
        order = sorted(self._pending.values(), key=self._priority_key)
        last = max(i for i, job in enumerate(order) if job.job_id in wanted)
        if self._planned >= (self._version, last + 1):
            return
        self._planned = (self._version, last + 1)
        now = self.clock.now()
        free = _Profile(now, self.gpus - self._used_total)
        used: dict[tuple[str, str], _Profile] = {}
        for job in self._running.values():
            mine = used.setdefault((job.user, job.qos), _Profile(now, 0))
            if job.time_limit is None or job.start_time is None:
                mine.add(now, math.inf, job.gpus)
                continue
            end = max(now, job.start_time + job.time_limit)
            free.add(end, math.inf, job.gpus)
            mine.add(now, end, job.gpus)
        for job in order[: last + 1]:
            job.expected_start = None
            tier = self.tiers[job.qos]
            cap = tier.max_gpus_per_user
            if (
                job.reason == "QOSMaxWallDurationPerJobLimit"
                or job.gpus > self.gpus
                or (cap is not None and job.gpus > cap)
            ):
                continue
            mine = used.setdefault((job.user, job.qos), _Profile(now, 0))
            length = math.inf if job.time_limit is None else job.time_limit
            for at in sorted({*free.times, *mine.times}):
                if at > now + BACKFILL_WINDOW_SECONDS:
                    break
                if free.least(at, at + length) >= job.gpus and (
                    cap is None or mine.most(at, at + length) + job.gpus <= cap
                ):
                    if job.reason == "QOSMaxGRESPerUser":
                        # As SLURM (22.05.8, 24.11.5): the per-user limit is checked after node selection, so a
                        # job the free GPUs could take now reads N/A, while one whose GPUs are busy too gets the
                        # planned start (the end of the time limits in the way); neither gets a reservation.
                        job.expected_start = at if self.gpus - self._used_total < job.gpus else None
                        break
                    job.expected_start = at
                    free.add(at, at + length, -job.gpus)
                    mine.add(at, at + length, job.gpus)
                    break

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


class _Profile:
    """A step function of time from ``start`` on (GPUs free, or GPUs one user holds on one QoS)."""

    def __init__(self, start: float, value: int) -> None:
        self.times: list[float] = [start]
        self.values: list[int] = [value]

    def _split(self, at: float) -> int:
        """The index of the step that begins at ``at`` (inserted if needed)."""
        i = bisect.bisect_right(self.times, at) - 1
        if self.times[i] == at:
            return i
        self.times.insert(i + 1, at)
        self.values.insert(i + 1, self.values[i])
        return i + 1

    def add(self, start: float, end: float, delta: int) -> None:
        """Add ``delta`` over ``[start, end)`` (``end`` may be infinite)."""
        if end <= start:
            return
        first = self._split(max(start, self.times[0]))
        last = len(self.times) if math.isinf(end) else self._split(end)
        for i in range(first, last):
            self.values[i] += delta

    def _over(self, start: float, end: float) -> list[int]:
        i = max(0, bisect.bisect_right(self.times, start) - 1)
        out = []
        while i < len(self.times) and self.times[i] < end:
            out.append(self.values[i])
            i += 1
        return out

    def least(self, start: float, end: float) -> int:
        """The smallest value over ``[start, end)``."""
        return min(self._over(start, end))

    def most(self, start: float, end: float) -> int:
        """The largest value over ``[start, end)``."""
        return max(self._over(start, end))
