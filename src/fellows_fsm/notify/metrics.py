"""The Prometheus metrics, read from the journal by the official ``prometheus_client`` (its text format, its
textfile writer, its HTTP endpoint): nothing of the format is written here.

``fellows_dispatches{state,lane}``, ``fellows_rung_changes_total{lane,from_qos,to_qos}``,
``fellows_paid_gpu_hours_total{lane}``, ``fellows_paid_cost_total{lane}``, ``fellows_budget_remaining{window}``,
``fellows_slurm_calls_total{cluster,command}`` (the driver's own calls, as it last journaled them),
``fellows_notify_deliveries{sink,status}``, ``fellows_notify_undeliverable_total{sink}`` and
``fellows_free_gpu_hours_total{cluster}`` (the free jobs' GPU-hours, as their ends were journaled: issue 38).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.journal.outbox import UNDELIVERABLE
from fellows_fsm.journal.queries import read_spend
from fellows_fsm.journal.store import Journal

__all__ = ["SLURM_CALLS", "JournalCollector", "registry_of", "remember_calls", "text", "write_textfile"]

SLURM_CALLS = "metrics.slurm_calls"
"""The meta key of the driver's SLURM calls per cluster and command (journaled each poll, when they changed)."""


def remember_calls(journal: Journal, calls: Mapping[str, Mapping[str, int]]) -> None:
    """Journal the driver's SLURM call counts (``{cluster: {command: n}}``) for ``fellows-fsm metrics``."""
    journal.put_meta(SLURM_CALLS, {c: dict(counts) for c, counts in calls.items()})


class JournalCollector(Collector):
    """Every metric, read from the journal at each collect (a scrape, a textfile write, ``fellows-fsm metrics``)."""

    def __init__(self, journal: Journal, budget: BudgetConfig | None) -> None:
        self.journal = journal
        self.budget = budget

    def collect(self) -> Iterator[Metric]:
        j = self.journal
        dispatches = GaugeMetricFamily("fellows_dispatches", "Dispatches by state and lane.", labels=["state", "lane"])
        for (state, lane), n in sorted(Counter((r.label, r.lane) for r in j.listings()).items()):
            dispatches.add_metric([state, lane], n)
        yield dispatches
        changes = CounterMetricFamily(
            "fellows_rung_changes",
            "Rung changes (each a step onto the next rung).",
            labels=["lane", "from_qos", "to_qos"],
        )
        for (lane, before, after), n in sorted(j.rung_change_counts().items()):
            changes.add_metric([lane, before, after], n)
        yield changes
        hours = CounterMetricFamily("fellows_paid_gpu_hours", "Paid GPU-hours run so far.", labels=["lane"])
        cost = CounterMetricFamily("fellows_paid_cost", "Paid cost so far (priced lanes).", labels=["lane"])
        now = time.time()
        for lane, (h, c) in sorted(j.paid_totals(now).items()):
            hours.add_metric([lane], h)
            cost.add_metric([lane], c)
        yield hours
        yield cost
        free = CounterMetricFamily(
            "fellows_free_gpu_hours", "Free GPU-hours run so far (ended jobs, per SLURM lane).", labels=["cluster"]
        )
        for lane, _jobs, gpu_hours in j.free_sums(0.0):
            free.add_metric([lane], gpu_hours)
        yield free
        yield from self._budget(now)
        calls = CounterMetricFamily(
            "fellows_slurm_calls", "SLURM commands run by the driver.", labels=["cluster", "command"]
        )
        for cluster, counts in sorted((j.get_meta(SLURM_CALLS) or {}).items()):
            for command, n in sorted(counts.items()):
                calls.add_metric([cluster, command], n)
        yield calls
        deliveries = GaugeMetricFamily(
            "fellows_notify_deliveries", "Events by sink and status.", labels=["sink", "status"]
        )
        undeliverable = CounterMetricFamily("fellows_notify_undeliverable", "Events given up on.", labels=["sink"])
        counts = j.delivery_counts()
        for (sink, status), n in sorted(counts.items()):
            deliveries.add_metric([sink, status], n)
        for sink in sorted({s for s, _ in counts}):
            undeliverable.add_metric([sink], counts.get((sink, UNDELIVERABLE), 0))
        yield deliveries
        yield undeliverable

    def _budget(self, now: float) -> Iterator[Metric]:
        remaining = GaugeMetricFamily(
            "fellows_budget_remaining",
            "What a [budget] window has left at worst (GPU-hours a day, cost a month).",
            labels=["window"],
        )
        b = self.budget
        if b is not None and b.limited:
            s = read_spend(self.journal, b, now)
            if b.paid_gpu_hours_per_day is not None:
                remaining.add_metric(["day_gpu_hours"], _finite(b.paid_gpu_hours_per_day - s.day.total.worst_gpu_hours))
            if b.paid_cost_per_month is not None:
                worst = s.month.total.worst_cost or 0.0
                remaining.add_metric(["month_cost"], _finite(b.paid_cost_per_month - worst))
        yield remaining


def _finite(value: float) -> float:
    return value if math.isfinite(value) else -math.inf


def registry_of(journal: Journal, budget: BudgetConfig | None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JournalCollector(journal, budget))
    return registry


def text(journal: Journal, budget: BudgetConfig | None) -> str:
    """The metrics in Prometheus's text format."""
    return generate_latest(registry_of(journal, budget)).decode()


def write_textfile(path: str, journal: Journal, budget: BudgetConfig | None) -> None:
    """Rewrite ``path`` atomically (a temporary file renamed over it: node_exporter never reads half)."""
    write_to_textfile(path, registry_of(journal, budget))
