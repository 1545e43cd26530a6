"""Every SLURM lane's port, as the driver uses them: one call per cluster, side by side, job ids that name their
cluster.

A dispatch walks the fellows ladder, then each next SLURM lane's (``[router] order``); the driver's observe, cancel
and token lookups go to every cluster it has jobs on at once (a poll costs the slower cluster's round trip, not the
sum). SLURM numbers jobs per cluster, so the same number on two clusters is two jobs: a job id is SLURM's own on
fellows and ``<id>@<lane>`` on another lane (``core/ladder.py``: ``qualified_job_id``), and every id given here is
routed back to its cluster by it. With one cluster every call goes straight to its port.

A cluster that does not answer fails only its own part: ``observe_each`` says which lanes answered, so the driver
stops the clock of just the dispatches whose rung is there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import attrs

from fellows_fsm.core.ladder import qualified_job_id, split_job_id
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError, SchedulerError, SchedulerUnreachable, SlurmCommandMissing
from fellows_fsm.scheduler.port import JobSpec, Observation, Scheduler, Workload

__all__ = ["Clusters"]

_T = TypeVar("_T")


class Clusters:
    """The ports of every SLURM lane, fellows first, by lane name; a Scheduler over all of them."""

    def __init__(self, ports: Mapping[str, Scheduler]) -> None:
        if not ports:
            raise ConfigError("no SLURM lane: a router needs the fellows lane's port at least")
        self.ports = dict(ports)
        self.first = next(iter(self.ports))
        self._only = self.ports[self.first] if len(self.ports) == 1 else None
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def of(cls, scheduler: Scheduler | Clusters) -> Clusters:
        """``scheduler`` if it is one already, else the one fellows port as Clusters."""
        return scheduler if isinstance(scheduler, Clusters) else cls({LADDER_LANE: scheduler})

    def port(self, lane: str) -> Scheduler:
        """The port of ``lane``'s cluster; ConfigError if this driver has none by that name (a journal written
        with a lane this config no longer has)."""
        try:
            return self.ports[lane]
        except KeyError:
            raise ConfigError(
                f"SLURM lane {lane!r} is not configured here (known: {', '.join(self.ports)}); add its "
                f"[lanes.{lane}] table back so its jobs can be followed"
            ) from None

    # ----------------------------------------------------------------- side by side
    def _side_by_side(self, calls: Mapping[str, Callable[[], _T]]) -> dict[str, _T | SchedulerError]:
        """Run one call per lane at once (threads: each waits on its own cluster); each lane's answer or error."""
        if len(calls) == 1:
            ((lane, call),) = calls.items()
            try:
                return {lane: call()}
            except SchedulerError as exc:
                return {lane: exc}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=len(self.ports), thread_name_prefix="cluster")
        futures = {lane: self._pool.submit(call) for lane, call in calls.items()}
        out: dict[str, _T | SchedulerError] = {}
        for lane, future in futures.items():
            try:
                out[lane] = future.result()
            except SchedulerError as exc:
                out[lane] = exc
        return out

    @staticmethod
    def _by_lane(job_ids: Sequence[str]) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = {}
        for job_id in job_ids:
            lane, raw = split_job_id(job_id)
            grouped.setdefault(lane, []).append(raw)
        return grouped

    @staticmethod
    def _named(lane: str, seen: Mapping[str, Observation]) -> dict[str, Observation]:
        if lane == LADDER_LANE:
            return dict(seen)
        return {
            qualified_job_id(lane, raw): attrs.evolve(o, job_id=qualified_job_id(lane, o.job_id))
            for raw, o in seen.items()
        }

    @staticmethod
    def _raise_first(answers: Mapping[str, object]) -> None:
        for answer in answers.values():
            if isinstance(answer, SchedulerError):
                raise answer

    # ----------------------------------------------------------------- the port, over every cluster
    def observe_each(self, job_ids: Sequence[str]) -> tuple[Mapping[str, Observation], dict[str, SchedulerError]]:
        """Every listed job, one observe (one squeue) per cluster, side by side: the observations of the clusters
        that answered, and the error of each that did not."""
        if self._only is not None:
            try:
                return self._only.observe(job_ids), {}
            except (SchedulerUnreachable, SlurmCommandMissing) as exc:  # (squeue not on PATH: it cannot be watched)
                return {}, {self.first: exc}
        grouped = self._by_lane(job_ids)
        calls = {lane: functools.partial(self.port(lane).observe, ids) for lane, ids in grouped.items()}
        seen: dict[str, Observation] = {}
        failed: dict[str, SchedulerError] = {}
        for lane, answer in self._side_by_side(calls).items():
            if isinstance(answer, (SchedulerUnreachable, SlurmCommandMissing)):
                failed[lane] = answer
            elif isinstance(answer, SchedulerError):
                raise answer
            else:
                seen.update(self._named(lane, answer))
        return seen, failed

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        """Every listed job (Scheduler's observe); SchedulerUnreachable if any of their clusters did not answer."""
        if self._only is not None:
            return self._only.observe(job_ids)
        seen, failed = self.observe_each(job_ids)
        self._raise_first(failed)
        return seen

    def submit(
        self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None, lane: str = LADDER_LANE
    ) -> str:
        """sbatch on ``lane``'s cluster; the job id that names it."""
        return qualified_job_id(lane, self.port(lane).submit(spec, qos=qos, token=token, deadline=deadline))

    def find_by_token(self, token: str, lane: str = LADDER_LANE) -> Observation | None:
        """The job carrying ``token`` on ``lane``'s cluster, or None."""
        found = self.port(lane).find_by_token(token)
        return None if found is None else self._named(lane, {found.job_id: found})[qualified_job_id(lane, found.job_id)]

    def find_tokens(self, prefix: str) -> list[Observation]:
        """Every job whose token starts with ``prefix``, on every cluster (side by side); SchedulerError if any
        cluster did not answer (a sweep that saw only some clusters proves nothing)."""
        if self._only is not None:
            return list(self._only.find_tokens(prefix))
        calls = {lane: functools.partial(port.find_tokens, prefix) for lane, port in self.ports.items()}
        answers = self._side_by_side(calls)
        self._raise_first(answers)
        out: list[Observation] = []
        for lane, found in answers.items():
            assert not isinstance(found, SchedulerError)
            out.extend(self._named(lane, {o.job_id: o for o in found}).values())
        return out

    def cancel(self, job_ids: Sequence[str]) -> None:
        """scancel every listed job, on its own cluster (side by side)."""
        if self._only is not None:
            self._only.cancel(job_ids)
            return
        calls: dict[str, Callable[[], None]] = {}
        for lane, ids in self._by_lane(job_ids).items():
            calls[lane] = functools.partial(self.port(lane).cancel, ids)
        self._raise_first(self._side_by_side(calls))

    def cancel_if_pending(self, job_ids: Sequence[str], *, read_back: bool = True) -> Mapping[str, Observation]:
        """Cancel each listed job only while pending, on its own cluster (side by side); the jobs proved gone (or
        read back). A cluster that did not answer proves none of its jobs gone: the next observe reads them."""
        if self._only is not None:
            return self._only.cancel_if_pending(job_ids, read_back=read_back)
        grouped = self._by_lane(job_ids)
        calls = {
            lane: functools.partial(self.port(lane).cancel_if_pending, ids, read_back=read_back)
            for lane, ids in grouped.items()
        }
        out: dict[str, Observation] = {}
        answers = self._side_by_side(calls)
        for lane, answer in answers.items():
            if isinstance(answer, SchedulerUnreachable):
                continue
            if isinstance(answer, SchedulerError):
                raise answer
            out.update(self._named(lane, answer))
        if not out and answers and all(isinstance(a, SchedulerUnreachable) for a in answers.values()):
            self._raise_first(answers)
        return out

    def change_qos(self, job_id: str, qos: str) -> bool:
        """Move a pending job to ``qos`` on its own cluster (same job id)."""
        lane, raw = split_job_id(job_id)
        return self.port(lane).change_qos(raw, qos)

    def workload(self, *, since: float) -> Workload:
        """The fellows cluster's workload (each lane's is read through its own port: driver/workload.py)."""
        return self.port(self.first).workload(since=since)
