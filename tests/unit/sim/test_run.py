"""Strategies played through the real Router on the simulated cluster, and the sweep's table and JSON."""

from __future__ import annotations

import json

import pytest

from fellows_fsm.errors import ConfigError
from fellows_fsm.sim.report import RESULT_KEYS, format_table, to_json
from fellows_fsm.sim.run import run_sweep, simulate
from fellows_fsm.sim.strategies import STRATEGIES, SimParams, parse_park_caps, parse_strategies
from fellows_fsm.sim.trace import TraceJob, synthetic_trace

NEVER = 10 * 86_400.0  # longer than any trace here, and under the 30-day cap limit
"""A park cap that never expires within a simulation."""
TINY = 1e-3
"""The config refuses a park cap of 0 (it must be positive), so 'zero caps' are 1 ms caps."""
ROUTED = ("static", "single-timeout", "ladder", "reason-aware")


def mine(*jobs: tuple[float, int, float]) -> tuple[TraceJob, ...]:
    """My jobs from (submit_at, gpus, duration) triples."""
    return tuple(TraceJob(i, at, gpus, duration, "me") for i, (at, gpus, duration) in enumerate(jobs))


def burst(count: int, *, duration: float = 3600.0) -> tuple[TraceJob, ...]:
    """``count`` 8-GPU jobs of mine submitted together, 10 s apart."""
    return mine(*((10.0 * i, 8, duration) for i in range(count)))


def test_with_caps_that_never_expire_the_ladder_equals_static() -> None:
    """With caps that never expire no job leaves high-eur, so ladder's free share is static's."""
    trace = synthetic_trace(seed=2, hours=12)
    static = simulate(trace, "static", NEVER)
    ladder = simulate(trace, "ladder", NEVER)
    assert ladder.free_share == static.free_share
    assert {o.qos for o in ladder.outcomes} == {"high-eur"}
    assert ladder.rung_changes == 0
    assert ladder.gcp_gpu_hours == 0


@pytest.mark.parametrize("strategy", [s for s in ROUTED if s != "reason-aware"])
def test_with_tiny_caps_every_job_that_cannot_start_at_once_goes_to_gcp(strategy: str) -> None:
    """With 1 ms caps the two jobs under high-eur's cap run at once and the two over it go to GCP."""
    result = simulate(burst(4), strategy, TINY)
    assert [o.lane for o in result.outcomes] == ["fellows", "fellows", "gcp", "gcp"]
    assert [o.start_seconds for o in result.outcomes[:2]] == [0.0, 0.0]
    assert all(o.qos == "high-eur" for o in result.outcomes[:2])


def test_with_tiny_caps_reason_aware_moves_the_jobs_over_my_cap_in_their_first_tick() -> None:
    """With 1 ms caps, reason-aware leaves high-eur at the first look at the two jobs over my cap, the cancel is
    proved in that tick (as the SLURM port proves it), and they start on normal-eur while its window is open."""
    result = simulate(burst(4), "reason-aware", TINY)
    assert [o.lane for o in result.outcomes] == ["fellows"] * 4
    assert [o.qos for o in result.outcomes] == ["high-eur", "high-eur", "normal-eur", "normal-eur"]
    assert [o.start_seconds for o in result.outcomes] == [0.0, 0.0, 0.0, 0.0]
    assert result.gcp_gpu_hours == 0


def test_tiny_caps_on_a_busy_cluster_send_every_blocked_job_to_gcp() -> None:
    """On a cluster busy with others' jobs, a 1 ms ladder starts only jobs that fit at their submission (or in the
    instant before their cancel lands: with no sbatch --deadline, SLURM no longer drops them at the window's end)."""
    trace = synthetic_trace(seed=4, hours=12)
    result = simulate(trace, "ladder", TINY)
    assert {o.lane for o in result.outcomes} <= {"fellows", "gcp"}
    assert all((o.start_seconds or 0.0) < 1.0 for o in result.outcomes if o.lane == "fellows")
    assert any(o.lane == "gcp" for o in result.outcomes)


def test_the_ladder_walks_past_my_own_cap_before_gcp() -> None:
    """Four 8-GPU jobs: two run on high-eur, two wait out the cap and run on normal-eur, none on GCP."""
    result = simulate(burst(4), "ladder", 60.0)
    assert [o.qos for o in result.outcomes] == ["high-eur", "high-eur", "normal-eur", "normal-eur"]
    assert [o.rung_changes for o in result.outcomes] == [0, 0, 1, 1]
    assert result.gcp_gpu_hours == 0
    assert all(60 <= (o.start_seconds or 0) <= 70 for o in result.outcomes[2:])


def test_reason_aware_leaves_an_own_capped_rung_at_the_first_poll() -> None:
    """Reason-aware parks on QOSMaxGRESPerUser at once, so jobs over my cap start one poll after submission."""
    result = simulate(burst(4), "reason-aware", 600.0, SimParams(poll_interval_seconds=10.0))
    assert [o.qos for o in result.outcomes] == ["high-eur", "high-eur", "normal-eur", "normal-eur"]
    assert all((o.start_seconds or 0) <= 10.0 for o in result.outcomes)


def test_static_sends_my_jobs_over_the_cap_to_gcp_after_one_cap() -> None:
    """Static waits one cap on high-eur, then hands the jobs over the cap to GCP."""
    result = simulate(burst(4), "static", 60.0)
    assert [o.lane for o in result.outcomes] == ["fellows", "fellows", "gcp", "gcp"]
    assert result.gcp_gpu_hours == pytest.approx(16.0)


def test_single_timeout_waits_the_whole_ladder_budget_on_high_eur() -> None:
    """Single-timeout's one wait is three caps long, so a cap freed within it runs the job on high-eur."""
    trace = mine((0, 8, 150), (0, 8, 150), (10, 8, 60))
    single = simulate(trace, "single-timeout", 60.0)
    static = simulate(trace, "static", 60.0)
    assert [o.qos for o in single.outcomes] == ["high-eur"] * 3
    assert single.outcomes[2].start_seconds == pytest.approx(140.0)
    assert static.outcomes[2].lane == "gcp"


def test_the_oracle_starts_at_the_earliest_tier_or_goes_to_gcp_at_once() -> None:
    """The oracle puts a job where it starts first, and hands one no tier can start in budget to GCP at once."""
    trace = mine((0, 8, 3600), (10, 8, 3600), (20, 8, 3600), (30, 8, 3600), (100, 72, 60))
    oracle = simulate(trace, "oracle", 60.0, SimParams(gpus=80))
    lanes = [(o.lane, o.qos, o.start_seconds) for o in oracle.outcomes]
    assert lanes[:4] == [
        ("fellows", "high-eur", 0.0),
        ("fellows", "high-eur", 0.0),
        ("fellows", "normal-eur", 0.0),
        ("fellows", "normal-eur", 0.0),
    ]
    assert lanes[4] == ("gcp", None, 0.0)


def test_oracle_prefer_waits_on_high_eur_when_it_starts_there_within_one_cap() -> None:
    """oracle-prefer keeps a job on high-eur if high-eur starts it within one cap, where the oracle takes normal-eur."""
    trace = mine((0, 8, 100), (0, 8, 100), (10, 8, 3600))
    oracle = simulate(trace, "oracle", 600.0)
    prefer = simulate(trace, "oracle-prefer", 600.0)
    assert (oracle.outcomes[2].qos, oracle.outcomes[2].start_seconds) == ("normal-eur", 0.0)
    assert (prefer.outcomes[2].qos, prefer.outcomes[2].start_seconds) == ("high-eur", 90.0)


def test_oracle_prefer_takes_the_earliest_tier_when_the_first_rung_starts_the_job_too_late() -> None:
    """With a 60 s cap high-eur starts the job 90 s after submission, past one cap: oracle-prefer takes normal-eur."""
    trace = mine((0, 8, 100), (0, 8, 100), (10, 8, 3600))
    prefer = simulate(trace, "oracle-prefer", 60.0)
    assert (prefer.outcomes[2].qos, prefer.outcomes[2].start_seconds) == ("normal-eur", 0.0)


def test_debug_intent_starts_on_dev_eur() -> None:
    """A debug-intent job starts on the debug QoS (dev-eur) before the ladder."""
    trace = (TraceJob(0, 0.0, 4, 60.0, "me", intent="debug"),)
    assert simulate(trace, "ladder", 60.0).outcomes[0].qos == "dev-eur"


def test_on_the_synthetic_workload_the_ladder_sends_fewer_gpu_hours_to_gcp() -> None:
    """Where my bursts saturate high-eur's cap, the ladder hands less to GCP than static and single-timeout."""
    results = {r.strategy: r for r in run_sweep(synthetic_trace(), park_caps=(600.0,))}
    assert results["ladder"].gcp_gpu_hours < results["static"].gcp_gpu_hours
    assert results["ladder"].gcp_gpu_hours < results["single-timeout"].gcp_gpu_hours
    assert results["ladder"].free_share > results["static"].free_share


def test_sweep_json_has_the_documented_keys_and_the_table_one_row_per_run() -> None:
    """to_json gives one object per strategy and cap with the documented keys; the table has a row each."""
    results = run_sweep(burst(3), park_caps=(60.0, 300.0))
    records = json.loads(to_json(results))
    assert [(r["strategy"], r["park_cap_seconds"]) for r in records] == [
        (s, cap) for cap in (60.0, 300.0) for s in STRATEGIES
    ]
    assert all(list(r)[: len(RESULT_KEYS)] == list(RESULT_KEYS) for r in records)
    assert next(r for r in records if r["strategy"] == "oracle")["free_share_vs_oracle"] == 1.0
    table = format_table(results).splitlines()
    assert len(table) == 2 + len(records)
    assert table[0].split()[:2] == ["strategy", "park"]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: run_sweep(burst(1), strategies=("greedy",)), "strategy 'greedy' is not known"),
        (lambda: run_sweep(burst(1), park_caps=(0.0,)), "park_cap_seconds=0.0"),
        (lambda: run_sweep((TraceJob(0, 0, 8, 60, "bob"),)), "no job of user 'me'"),
        (lambda: SimParams(ladder=("high-eur", "gold")), "QoS 'gold' is not a tier"),
    ],
    ids=["unknown-strategy", "zero-cap", "no-job-of-mine", "ladder-outside-tiers"],
)
def test_bad_sweeps_are_refused_with_a_config_error(call: object, words: str) -> None:
    """An unknown strategy, a zero cap, a trace without my jobs or a ladder outside the tiers is a ConfigError."""
    with pytest.raises(ConfigError, match=words):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "words"),
    [("60,abc", "'abc' is not a number"), ("60,0", "'0' must be a positive")],
    ids=["not-a-number", "zero"],
)
def test_park_caps_text_is_parsed_or_refused_naming_the_item(text: str, words: str) -> None:
    """'60,300' parses to floats; a bad item is a ConfigError naming it."""
    assert parse_park_caps("60, 300") == (60.0, 300.0)
    with pytest.raises(ConfigError, match=words):
        parse_park_caps(text)


def test_strategies_text_is_parsed_or_refused_naming_the_unknown_one() -> None:
    """'static,ladder' parses in order; an unknown name is a ConfigError naming it."""
    assert parse_strategies("static, ladder") == ("static", "ladder")
    with pytest.raises(ConfigError, match="'fifo' is not known"):
        parse_strategies("ladder,fifo")
