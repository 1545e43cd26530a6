"""Play a workload on the simulated clusters under one strategy: the real Router and Dispatch decide.

With more clusters than fellows (``SimParams.clusters``) each is a SLURM lane of the order, its simulated cluster
the router's port for that lane (``Router(..., ports=...)``), and a dispatch walks every ladder before GCP.
Every strategy but the oracle is a configuration of the one lifecycle machine, driven by the real
``Router.run`` loop on a SimClock, with a journal in a temporary directory and an in-process GCP lane
(no process is forked per handoff). The oracle is a bound, not a strategy: it looks ahead on a copy.
The strategies and their parameters are sim/strategies.py, the outcomes sim/results.py (their names are
re-exported here).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from fellows_fsm.clock import Clock
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ladder import split_job_id
from fellows_fsm.core.vocab import LADDER_LANE, Trigger
from fellows_fsm.driver.router import Router
from fellows_fsm.errors import ConfigError, SubmitRejected
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.command.lane import CommandLane
from fellows_fsm.lanes.handoff import CompletedHandoff, Handoff, HandoffFiles, HandoffResult, Started
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SIM_EPOCH, SimClock
from fellows_fsm.sim.cluster import SimCluster
from fellows_fsm.sim.clusters import cluster_background
from fellows_fsm.sim.jobs import SimJob
from fellows_fsm.sim.results import GCP, JobOutcome, RunResult
from fellows_fsm.sim.strategies import (
    ORACLES,
    STRATEGIES,
    SimParams,
    cluster_config,
    strategy_config,
)
from fellows_fsm.sim.trace import TraceJob

__all__ = ["InProcessLane", "minutes_limit", "run_sweep", "simulate"]


class InProcessLane(CommandLane):
    """A GCP lane that takes a job in process: it records the handoff time and forks nothing."""

    def __init__(self, config: CommandSettings, clock: Clock) -> None:
        super().__init__(config)
        self.clock = clock
        self.handed: dict[str, float] = {}
        """When each dispatch was handed over, by dispatch id."""

    def start(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, *, now: float) -> Handoff:
        """Record the handoff and succeed at once."""
        self.handed[dispatch_id] = self.clock.now()
        return CompletedHandoff(HandoffResult(self.command(dispatch_id, spec), 0, "", ""))

    def adopt(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, was: Started) -> Handoff | None:
        """Nothing runs out of process: a handoff is adopted only if it was recorded."""
        return self.start(dispatch_id, spec, files, now=was.at) if dispatch_id in self.handed else None

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """True once this dispatch was handed over."""
        return dispatch_id in self.handed


_GCP_LANE = CommandSettings(name=GCP, command=("simulated-gcp", "{dispatch_id}"))


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
    """Moves simulated time on every cluster at once, dispatching my jobs through the router as their submit times
    come. Each cluster keeps its own clock (its events play in their own time order); fellows' is the router's."""

    def __init__(
        self, jobs: Sequence[TraceJob], clusters: Mapping[str, SimCluster], origin: float, router: Router
    ) -> None:
        self.jobs = sorted(jobs, key=lambda j: (j.submit_at, j.index))
        self.clusters = clusters
        self.cluster = clusters[LADDER_LANE]
        self.origin = origin
        self.router = router
        self.next = 0
        self.dispatches: dict[int, Dispatch] = {}

    def next_time(self) -> float | None:
        return self.origin + self.jobs[self.next].submit_at if self.next < len(self.jobs) else None

    def _all_to(self, when: float) -> None:
        for cluster in self.clusters.values():
            cluster.advance_to(when)

    def advance_to(self, when: float) -> None:
        while (at := self.next_time()) is not None and at <= when:
            self._all_to(at)
            job = self.jobs[self.next]
            self.next += 1
            spec = _spec(job)
            for cluster in self.clusters.values():
                cluster.durations[spec.script] = job.duration
            try:
                handle = self.router.dispatch(spec, intent=job.intent)
            except SubmitRejected:
                continue
            dispatch = self.router.live.get(handle.dispatch_id)
            if dispatch is not None:
                self.dispatches[job.index] = dispatch
        self._all_to(when)

    def sleep(self, seconds: float) -> None:
        """The router's sleep: simulated time passes, and nothing else."""
        self.advance_to(self.cluster.clock.now() + seconds)


def _outcome(job: TraceJob, **values: Any) -> JobOutcome:
    return JobOutcome(index=job.index, gpus=job.gpus, duration=job.duration, **values)


def _clusters(trace: Sequence[TraceJob], params: SimParams, clock: SimClock) -> dict[str, SimCluster]:
    """Every free cluster, fellows first (on ``clock``, the router's; the trace's others load it), then each of
    ``params.clusters`` on a clock of its own, loaded with its own others' jobs over the trace's span."""
    origin = clock.now()
    fellows = SimCluster(clock, gpus=params.gpus, tiers=params.tiers)
    fellows.set_arrivals(trace, origin=origin)
    out = {LADDER_LANE: fellows}
    hours = max((j.submit_at for j in trace), default=0.0) / 3600.0
    for c in params.clusters:
        other = SimCluster(SimClock(origin), gpus=c.gpus, tiers=c.tiers)
        other.set_arrivals(cluster_background(c, hours=hours), origin=origin)
        out[c.name] = other
    return out


def _config(strategy: str, cap: float, params: SimParams, state_dir: str) -> Config:
    """The product's config for one strategy: fellows' ladder, each more cluster's, then the simulated GCP lane."""
    more = tuple(cluster_config(strategy, cap, c, params) for c in params.clusters)
    table: dict[str, Any] = {"max_rung_changes_per_tick": params.max_rung_changes_per_tick}
    if more:  # as [router] order reads from the file (its converter's type is lost on mypy)
        table["order"] = (LADDER_LANE, *(c.name for c in more), GCP)
    router = RouterConfig(**table)
    return Config(
        fellows=strategy_config(strategy, cap, params), lanes=(*more, _GCP_LANE), router=router, state_dir=state_dir
    )


def _run_router(trace: Sequence[TraceJob], strategy: str, cap: float, params: SimParams) -> RunResult:
    clock = SimClock(SIM_EPOCH)
    origin = clock.now()
    clusters = _clusters(trace, params, clock)
    mine = [j for j in trace if j.mine]
    limit = origin + max((j.submit_at for j in mine), default=0.0) + params.max_wait_seconds
    with tempfile.TemporaryDirectory(prefix="fellows-sim-") as state_dir:
        config = _config(strategy, cap, params, state_dir)
        journal = Journal(config.journal_path)
        try:
            lane = InProcessLane(_GCP_LANE, clock)
            ports = {name: c for name, c in clusters.items() if name != LADDER_LANE}
            router = Router(
                config, clusters[LADDER_LANE], journal, clock=clock, lanes={GCP: lane}, ports=ports or None
            ).start()
            feeder = _Feeder(mine, clusters, origin, router)
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
        if any(s.trigger == Trigger.START for s in d.history) and d.job_id is not None:
            where, raw = split_job_id(d.job_id)
            ran = clusters[where].jobs[raw]
            assert ran.start_time is not None
            outcomes.append(
                _outcome(job, lane=where, qos=ran.qos, start_seconds=ran.start_time - submitted, rung_changes=changes)
            )
        elif d.id in lane.handed:
            wait = lane.handed[d.id] - submitted + params.gcp_start_seconds
            outcomes.append(_outcome(job, lane=GCP, qos=None, start_seconds=wait, rung_changes=changes))
        else:
            outcomes.append(_outcome(job, lane="unstarted", qos=None, start_seconds=None, rung_changes=changes))
    return RunResult(strategy, cap, tuple(outcomes), tuple(clusters))


def _run_oracle(trace: Sequence[TraceJob], cap: float, params: SimParams, *, prefer: bool = False) -> RunResult:
    """Clairvoyant placement within the ladder's budget: earliest start over the granted tiers, else GCP now.

    For each of my jobs, at its submission, a copy of the rung's cluster (with every background arrival to come)
    is played forward once per rung of its ladder (every free cluster's, in order); the job goes to the rung that
    starts it first if that is within the ladder's worst-case wait, else to GCP at once. It never changes rung. With
    ``prefer`` (oracle-prefer) it keeps the user's preference: the first rung, in ladder order, that starts the job
    within one cap of its submission wins over an earlier start further down.
    """
    clock = SimClock(SIM_EPOCH)
    origin = clock.now()
    clusters = _clusters(trace, params, clock)
    config = _config("oracle", cap, params, tempfile.gettempdir())
    mine = sorted((j for j in trace if j.mine), key=lambda j: (j.submit_at, j.index))
    placed: dict[int, tuple[str, SimJob]] = {}
    to_gcp: dict[int, float] = {}
    for job in mine:
        now = origin + job.submit_at
        for cluster in clusters.values():
            cluster.advance_to(now)
        ladder = config.ladder_for(job.intent)
        best: tuple[float, str, str] | None = None
        preferred: tuple[str, str] | None = None
        for rung in ladder.rungs:
            twin = clusters[rung.lane].fork()
            probe = twin.queue_mine(job, rung.qos)
            start = twin.run_until_started(probe.job_id, now + ladder.worst_case_seconds)
            if start is not None and (best is None or start < best[0]):
                best = (start, rung.lane, rung.qos)
            if prefer and preferred is None and start is not None and start <= now + rung.park_cap_seconds:
                preferred = (rung.lane, rung.qos)
        if preferred is not None:
            best = (0.0, *preferred)
        if best is None:
            to_gcp[job.index] = now
        else:
            placed[job.index] = (best[1], clusters[best[1]].queue_mine(job, best[2]))
    limit = origin + max((j.submit_at for j in mine), default=0.0) + params.max_wait_seconds
    while any(j.state == "PENDING" for _, j in placed.values()):
        at = min((t for c in clusters.values() if (t := c.next_event_time()) is not None), default=None)
        if at is None or at > limit:
            break
        for cluster in clusters.values():
            cluster.advance_to(at)
    outcomes = []
    for job in mine:
        submitted = origin + job.submit_at
        if job.index in to_gcp:
            wait = to_gcp[job.index] - submitted + params.gcp_start_seconds
            outcomes.append(_outcome(job, lane=GCP, qos=None, start_seconds=wait, rung_changes=0))
            continue
        where, ran = placed[job.index]
        if ran.start_time is None:
            outcomes.append(_outcome(job, lane="unstarted", qos=None, start_seconds=None, rung_changes=0))
        else:
            wait = ran.start_time - submitted
            outcomes.append(_outcome(job, lane=where, qos=ran.qos, start_seconds=wait, rung_changes=0))
    return RunResult("oracle-prefer" if prefer else "oracle", cap, tuple(outcomes), tuple(clusters))


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
