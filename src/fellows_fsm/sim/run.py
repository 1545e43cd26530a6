"""Play a workload on the simulated cluster under one strategy: the real Router and Dispatch decide.

Every strategy but the oracle is a configuration of the one lifecycle machine, driven by the real
``Router.run`` loop on a SimClock, with a journal in a temporary directory and an in-process GCP lane
(no process is forked per handoff). The oracle is a bound, not a strategy: it looks ahead on a copy.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from fellows_fsm.clock import Clock
from fellows_fsm.config import DEFAULT_LADDER, Config, FellowsConfig, LaneConfig, RouterConfig
from fellows_fsm.core import Dispatch
from fellows_fsm.core.vocab import FELLOWS, RUNNING
from fellows_fsm.errors import ConfigError, SubmitRejected
from fellows_fsm.journal import Journal
from fellows_fsm.lanes import CommandLane, CompletedHandoff, Handoff, HandoffFiles, HandoffResult
from fellows_fsm.router import Router
from fellows_fsm.scheduler import JobSpec
from fellows_fsm.sim.clock import SIM_EPOCH, SimClock
from fellows_fsm.sim.cluster import FELLOWS_TIERS, SimCluster, SimJob, Tier
from fellows_fsm.sim.trace import TraceJob

__all__ = [
    "DEFAULT_STRATEGIES",
    "GCP",
    "STRATEGIES",
    "InProcessLane",
    "JobOutcome",
    "RunResult",
    "SimParams",
    "minutes_limit",
    "parse_park_caps",
    "parse_strategies",
    "run_sweep",
    "simulate",
    "strategy_config",
]

STRATEGIES = (
    "static",
    "single-timeout",
    "ladder",
    "reason-aware",
    "predictive",
    "calibrated",
    "oracle",
    "oracle-prefer",
)
"""The strategies, in the order tables list them."""
PARK_EARLY = {"reason-aware": "own-cap", "predictive": "estimate", "calibrated": "calibrated"}
"""The product's ``[fellows] park_early`` policy each strategy plays (every other router strategy: "off")."""
ORACLES = ("oracle", "oracle-prefer")
DEFAULT_STRATEGIES = ("static", "single-timeout", "ladder", "reason-aware", "predictive", "oracle")
"""What ``fellows-fsm simulate`` plays unless told (oracle-prefer costs a second look-ahead per job)."""
GCP = "gcp"


@attrs.frozen(kw_only=True)
class SimParams:
    """The simulated cluster and router: everything but the workload, the strategy and the park cap."""

    gpus: int = 64
    """GPUs in the cluster's pool (the local dev cluster has 64)."""
    tiers: tuple[Tier, ...] = FELLOWS_TIERS
    ladder: tuple[str, ...] = DEFAULT_LADDER
    """The QoS ladder of the ``ladder`` strategies; ``static`` and ``single-timeout`` use its first rung."""
    debug_qos: str | None = "dev-eur"
    """Where debug-intent jobs start (before the ladder), as in ``[fellows] debug_qos``."""
    poll_interval_seconds: float = 10.0
    max_rung_changes_per_tick: int = 20
    gcp_start_seconds: float = 0.0
    """Time from a GCP handoff to the job running there, added to its time-to-start."""
    max_wait_seconds: float = 14 * 86_400.0
    """How long past the last submission the simulation may run; jobs not started by then are unstarted."""
    park_early_last_rung: bool = False
    """``[fellows] park_early_last_rung`` for the reason-aware and predictive strategies (the product's default)."""

    def __attrs_post_init__(self) -> None:
        if self.gpus < 1:
            raise ConfigError(f"gpus={self.gpus!r}: the cluster needs at least one GPU")
        names = {t.name for t in self.tiers}
        for qos in (*self.ladder, *([self.debug_qos] if self.debug_qos else [])):
            if qos not in names:
                raise ConfigError(f"QoS {qos!r} is not a tier of the simulated cluster ({', '.join(sorted(names))})")
        if self.gcp_start_seconds < 0:
            raise ConfigError(f"gcp_start_seconds={self.gcp_start_seconds!r} must be zero or more")


@attrs.frozen
class JobOutcome:
    """Where one of my jobs ran and how long it waited to start."""

    index: int
    gpus: int
    duration: float
    lane: str
    """``fellows`` (the free cluster), ``gcp``, ``unstarted`` (not started within the run), or ``rejected``."""
    qos: str | None
    """The QoS it ran on, on the free cluster."""
    start_seconds: float | None
    """Seconds from submission to running (on GCP: to the handoff, plus ``gcp_start_seconds``)."""
    rung_changes: int

    @property
    def gpu_hours(self) -> float:
        """GPUs times duration, in hours."""
        return self.gpus * self.duration / 3600.0


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile with linear interpolation between order statistics; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@attrs.frozen
class RunResult:
    """One strategy at one park cap on one workload: every job's outcome and the figures over them."""

    strategy: str
    park_cap_seconds: float
    outcomes: tuple[JobOutcome, ...]

    @property
    def free_share(self) -> float:
        """Share of my GPU-hours that ran on the free cluster."""
        total = math.fsum(o.gpu_hours for o in self.outcomes)
        free = math.fsum(o.gpu_hours for o in self.outcomes if o.lane == FELLOWS)
        return free / total if total > 0 else 0.0

    @property
    def gcp_gpu_hours(self) -> float:
        """GPU-hours handed to GCP."""
        return math.fsum(o.gpu_hours for o in self.outcomes if o.lane == GCP)

    @property
    def start_seconds(self) -> tuple[float, ...]:
        """Time-to-start of every job that started (free cluster or GCP)."""
        return tuple(o.start_seconds for o in self.outcomes if o.start_seconds is not None)

    @property
    def p50_start_seconds(self) -> float | None:
        """Median time-to-start."""
        return _quantile(self.start_seconds, 0.5)

    @property
    def p95_start_seconds(self) -> float | None:
        """95th percentile of time-to-start."""
        return _quantile(self.start_seconds, 0.95)

    @property
    def rung_changes(self) -> int:
        """Cancel-and-resubmit moves, over every job."""
        return sum(o.rung_changes for o in self.outcomes)

    @property
    def unstarted(self) -> int:
        """Jobs that neither started nor went to GCP within the run."""
        return sum(1 for o in self.outcomes if o.lane in ("unstarted", "rejected"))


def strategy_config(strategy: str, park_cap_seconds: float, params: SimParams) -> FellowsConfig:
    """The ``[fellows]`` config that makes the lifecycle machine play ``strategy`` at this park cap.

    static: a ladder of just the first QoS, one cap, then GCP (today's behaviour). single-timeout: the
    same rung with the whole ladder's worst case as its one cap (Nextflow's maxSubmitAwait with that
    budget). ladder, reason-aware, predictive, the oracles: the full ladder with the cap on every rung;
    reason-aware, predictive and calibrated are the ladder with ``park_early`` "own-cap", "estimate" and
    "calibrated" (PARK_EARLY; calibrated reads the simulated cluster's history through the real router).
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy {strategy!r} is not known; use one of {', '.join(STRATEGIES)}")
    ladder = params.ladder
    cap = park_cap_seconds
    if strategy in ("static", "single-timeout"):
        cap = cap * len(ladder) if strategy == "single-timeout" else cap
        ladder = ladder[:1]
    return FellowsConfig(
        qos=ladder[0],
        qos_ladder=ladder[1:],
        park_cap_seconds=cap,
        poll_interval_seconds=params.poll_interval_seconds,
        debug_qos=params.debug_qos,
        park_early=PARK_EARLY.get(strategy, "off"),
        park_early_last_rung=params.park_early_last_rung,
    )


class InProcessLane(CommandLane):
    """A GCP lane that takes a job in process: it records the handoff time and forks nothing."""

    def __init__(self, config: LaneConfig, clock: Clock) -> None:
        super().__init__(config)
        self.clock = clock
        self.handed: dict[str, float] = {}
        """When each dispatch was handed over, by dispatch id."""

    def start(
        self, argv: tuple[str, ...], files: HandoffFiles, *, now: float, env: Mapping[str, str] | None = None
    ) -> Handoff:
        """Record the handoff (the dispatch id is the argv's last item) and succeed at once."""
        self.handed[argv[-1]] = self.clock.now()
        return CompletedHandoff(HandoffResult(argv, 0, "", ""))

    def adopt(
        self, argv: tuple[str, ...], files: HandoffFiles, *, pid: int | None, started_at: float
    ) -> Handoff | None:
        """Nothing runs out of process: a handoff is adopted only if it was recorded."""
        return self.start(argv, files, now=started_at) if argv[-1] in self.handed else None

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """True once this dispatch was handed over."""
        return dispatch_id in self.handed


_GCP_LANE = LaneConfig(name=GCP, command=("simulated-gcp", "{dispatch_id}"))


def minutes_limit(duration: float) -> int:
    """The job's time limit: its duration rounded up to whole minutes, as users write ``--time``."""
    return 60 * math.ceil(duration / 60.0)


def _spec(job: TraceJob) -> JobSpec:
    return JobSpec(
        name=f"sim-{job.index}",
        script=f"sim/job-{job.index}.sbatch",
        gpus=job.gpus,
        time_limit_seconds=minutes_limit(job.limit),
    )


class _Feeder:
    """Moves simulated time, dispatching my jobs through the router as their submit times come."""

    def __init__(self, jobs: Sequence[TraceJob], cluster: SimCluster, origin: float, router: Router) -> None:
        self.jobs = sorted(jobs, key=lambda j: (j.submit_at, j.index))
        self.cluster = cluster
        self.origin = origin
        self.router = router
        self.next = 0
        self.dispatches: dict[int, Dispatch] = {}

    def next_time(self) -> float | None:
        return self.origin + self.jobs[self.next].submit_at if self.next < len(self.jobs) else None

    def advance_to(self, when: float) -> None:
        while (at := self.next_time()) is not None and at <= when:
            self.cluster.advance_to(at)
            job = self.jobs[self.next]
            self.next += 1
            spec = _spec(job)
            self.cluster.durations[spec.script] = job.duration
            try:
                handle = self.router.dispatch(spec, intent=job.intent)
            except SubmitRejected:
                continue
            dispatch = self.router.live.get(handle.dispatch_id)
            if dispatch is not None:
                self.dispatches[job.index] = dispatch
        self.cluster.advance_to(when)

    def sleep(self, seconds: float) -> None:
        """The router's sleep: simulated time passes, and nothing else."""
        self.advance_to(self.cluster.clock.now() + seconds)


def _outcome(job: TraceJob, **values: Any) -> JobOutcome:
    return JobOutcome(index=job.index, gpus=job.gpus, duration=job.duration, **values)


def _run_router(trace: Sequence[TraceJob], strategy: str, cap: float, params: SimParams) -> RunResult:
    clock = SimClock(SIM_EPOCH)
    origin = clock.now()
    cluster = SimCluster(clock, gpus=params.gpus, tiers=params.tiers)
    cluster.set_arrivals(trace, origin=origin)
    mine = [j for j in trace if j.mine]
    limit = origin + max((j.submit_at for j in mine), default=0.0) + params.max_wait_seconds
    with tempfile.TemporaryDirectory(prefix="fellows-sim-") as state_dir:
        config = Config(
            fellows=strategy_config(strategy, cap, params),
            lanes=(_GCP_LANE,),
            router=RouterConfig(max_rung_changes_per_tick=params.max_rung_changes_per_tick),
            state_dir=state_dir,
        )
        journal = Journal(config.journal_path)
        try:
            lane = InProcessLane(_GCP_LANE, clock)
            router = Router(config, cluster, journal, clock=clock, lanes={GCP: lane})
            feeder = _Feeder(mine, cluster, origin, router)
            while clock.now() < limit:
                if not router.busy:
                    at = feeder.next_time()
                    if at is None:
                        break
                    feeder.advance_to(at)
                    continue
                router.run(until=lambda _: clock.now() >= limit, sleep=feeder.sleep)
        finally:
            journal.close()
    outcomes = []
    for job in mine:
        submitted = origin + job.submit_at
        d = feeder.dispatches.get(job.index)
        if d is None:
            outcomes.append(_outcome(job, lane="rejected", qos=None, start_seconds=None, rung_changes=0))
            continue
        changes = sum(1 for s in d.history if s.trigger == "resubmit")
        if d.state == RUNNING and d.job_id is not None:
            ran = cluster.jobs[d.job_id]
            assert ran.start_time is not None
            outcomes.append(
                _outcome(job, lane=FELLOWS, qos=ran.qos, start_seconds=ran.start_time - submitted, rung_changes=changes)
            )
        elif d.id in lane.handed:
            wait = lane.handed[d.id] - submitted + params.gcp_start_seconds
            outcomes.append(_outcome(job, lane=GCP, qos=None, start_seconds=wait, rung_changes=changes))
        else:
            outcomes.append(_outcome(job, lane="unstarted", qos=None, start_seconds=None, rung_changes=changes))
    return RunResult(strategy, cap, tuple(outcomes))


def _run_oracle(trace: Sequence[TraceJob], cap: float, params: SimParams, *, prefer: bool = False) -> RunResult:
    """Clairvoyant placement within the ladder's budget: earliest start over the granted tiers, else GCP now.

    For each of my jobs, at its submission, a copy of the cluster (with every background arrival to come)
    is played forward once per tier of its ladder; the job goes to the tier that starts it first if that
    is within the ladder's worst-case wait, else to GCP at once. It never changes rung. With ``prefer``
    (oracle-prefer) it keeps the user's preference: the first rung, in ladder order, that starts the job
    within one cap of its submission wins over an earlier start further down.
    """
    fellows = strategy_config("oracle", cap, params)
    clock = SimClock(SIM_EPOCH)
    origin = clock.now()
    cluster = SimCluster(clock, gpus=params.gpus, tiers=params.tiers)
    cluster.set_arrivals(trace, origin=origin)
    mine = sorted((j for j in trace if j.mine), key=lambda j: (j.submit_at, j.index))
    placed: dict[int, SimJob] = {}
    to_gcp: dict[int, float] = {}
    for job in mine:
        now = origin + job.submit_at
        cluster.advance_to(now)
        ladder = fellows.ladder_for(job.intent)
        best: tuple[float, str] | None = None
        preferred: str | None = None
        for rung in ladder.rungs:
            twin = cluster.fork()
            probe = twin.queue_mine(job, rung.qos)
            start = twin.run_until_started(probe.job_id, now + ladder.worst_case_seconds)
            if start is not None and (best is None or start < best[0]):
                best = (start, rung.qos)
            if prefer and preferred is None and start is not None and start <= now + rung.park_cap_seconds:
                preferred = rung.qos
        if preferred is not None:
            best = (0.0, preferred)
        if best is None:
            to_gcp[job.index] = now
        else:
            placed[job.index] = cluster.queue_mine(job, best[1])
    limit = origin + max((j.submit_at for j in mine), default=0.0) + params.max_wait_seconds
    while any(j.state == "PENDING" for j in placed.values()):
        at = cluster.next_event_time()
        if at is None or at > limit:
            break
        cluster.advance_to(at)
    outcomes = []
    for job in mine:
        submitted = origin + job.submit_at
        if job.index in to_gcp:
            wait = to_gcp[job.index] - submitted + params.gcp_start_seconds
            outcomes.append(_outcome(job, lane=GCP, qos=None, start_seconds=wait, rung_changes=0))
            continue
        ran = placed[job.index]
        if ran.start_time is None:
            outcomes.append(_outcome(job, lane="unstarted", qos=None, start_seconds=None, rung_changes=0))
        else:
            wait = ran.start_time - submitted
            outcomes.append(_outcome(job, lane=FELLOWS, qos=ran.qos, start_seconds=wait, rung_changes=0))
    return RunResult("oracle-prefer" if prefer else "oracle", cap, tuple(outcomes))


def simulate(
    trace: Sequence[TraceJob], strategy: str, park_cap_seconds: float, params: SimParams | None = None
) -> RunResult:
    """Play ``trace`` under ``strategy`` with every rung's park cap ``park_cap_seconds``."""
    params = params or SimParams()
    strategy_config(strategy, park_cap_seconds, params)  # refuses an unknown strategy or a bad cap first
    if strategy in ORACLES:
        return _run_oracle(trace, park_cap_seconds, params, prefer=strategy == "oracle-prefer")
    return _run_router(trace, strategy, park_cap_seconds, params)


def run_sweep(
    trace: Sequence[TraceJob],
    *,
    strategies: Sequence[str] = STRATEGIES,
    park_caps: Sequence[float] = (60.0, 300.0, 600.0),
    params: SimParams | None = None,
) -> tuple[RunResult, ...]:
    """Every strategy at every park cap on the same trace, ordered by cap then strategy."""
    params = params or SimParams()
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise ConfigError(f"strategy {strategy!r} is not known; use one of {', '.join(STRATEGIES)}")
    if not any(j.mine for j in trace):
        raise ConfigError("the trace has no job of user 'me': there is nothing to dispatch")
    return tuple(simulate(trace, s, cap, params) for cap in park_caps for s in strategies)


def parse_park_caps(text: str) -> tuple[float, ...]:
    """Park caps from a comma list such as ``60,300,600`` (seconds); ConfigError naming a bad item."""
    caps = []
    for item in text.split(","):
        try:
            cap = float(item)
        except ValueError:
            raise ConfigError(
                f"--park-caps item {item.strip()!r} is not a number of seconds, e.g. 60,300,600"
            ) from None
        if not math.isfinite(cap) or cap <= 0:
            raise ConfigError(f"--park-caps item {item.strip()!r} must be a positive number of seconds")
        caps.append(cap)
    return tuple(caps)


def parse_strategies(text: str) -> tuple[str, ...]:
    """Strategies from a comma list such as ``static,ladder``; ConfigError naming an unknown one."""
    names = tuple(item.strip() for item in text.split(",") if item.strip())
    for name in names:
        if name not in STRATEGIES:
            raise ConfigError(f"strategy {name!r} is not known; use one of {', '.join(STRATEGIES)}")
    if not names:
        raise ConfigError(f"no strategy given; use one or more of {', '.join(STRATEGIES)}")
    return names


def by_index(result: RunResult) -> Mapping[int, JobOutcome]:
    """A run's outcomes by trace index."""
    return {o.index: o for o in result.outcomes}
