"""Several simulated clusters in the order: a second free cluster walked after fellows' ladder and before GCP, its
tiers, GPUs and others' load, the report's starts per cluster, and the command line that describes it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fellows_fsm.cli import main
from fellows_fsm.errors import ConfigError
from fellows_fsm.sim.clusters import DEFAULT_TIER, ClusterParams, cluster_background, parse_cluster_options
from fellows_fsm.sim.jobs import FELLOWS_TIERS, Tier
from fellows_fsm.sim.report import format_table, to_json
from fellows_fsm.sim.run import run_sweep, simulate
from fellows_fsm.sim.strategies import SimParams
from fellows_fsm.sim.trace import TraceJob, synthetic_trace

CAP = 60.0
INST_TIERS = (Tier("inst-high", 100, 16), Tier("inst-low", 10, None))
IDLE_INST = SimParams(clusters=(ClusterParams(name="inst", gpus=32, tiers=INST_TIERS),))
"""A second cluster of 32 idle GPUs: 16 of them mine on its first tier, any on its second."""
OPEN_INST = SimParams(clusters=(ClusterParams(name="inst", gpus=32),))
"""A second cluster of 32 idle GPUs and one uncapped tier (a cluster given no tiers)."""


def burst(count: int, *, duration: float = 3600.0) -> tuple[TraceJob, ...]:
    """``count`` 8-GPU jobs of mine submitted together, 10 s apart."""
    return tuple(TraceJob(i, 10.0 * i, 8, duration, "me") for i in range(count))


def blocked_fellows() -> tuple[TraceJob, ...]:
    """Another user holds all 64 fellows GPUs for a day, then four 8-GPU jobs of mine arrive: no fellows rung can
    start them within any ladder."""
    return (TraceJob(0, 0.0, 64, 86_400.0, "bob", qos="low-eur"), *(later(j) for j in burst(4)))


def later(job: TraceJob) -> TraceJob:
    """``job`` one place later in the trace, submitted 60 s later."""
    return TraceJob(job.index + 1, job.submit_at + 60.0, job.gpus, job.duration, job.user)


@pytest.mark.parametrize("strategy", ["static", "single-timeout", "ladder", "reason-aware", "calibrated", "oracle"])
def test_a_second_cluster_with_free_gpus_takes_the_jobs_one_cluster_sent_to_gcp(strategy: str) -> None:
    """Four 8-GPU jobs on a full fellows cluster all go to GCP with one cluster; with an idle second cluster in the
    order they all run there, so GCP GPU-hours fall to 0 and the free share rises to 1."""
    trace = blocked_fellows()
    one = simulate(trace, strategy, CAP)
    two = simulate(trace, strategy, CAP, OPEN_INST)
    assert [o.lane for o in one.outcomes] == ["gcp"] * 4
    assert one.gcp_gpu_hours == pytest.approx(32.0)
    assert [(o.lane, o.qos) for o in two.outcomes] == [("inst", "normal")] * 4
    assert two.gcp_gpu_hours == 0
    assert (one.free_share, two.free_share) == (0.0, 1.0)
    assert two.starts == {"fellows": 0, "inst": 4, "gcp": 0}


def test_the_second_cluster_is_tried_only_after_fellows_whole_ladder() -> None:
    """On the ladder, a job fellows cannot start waits out fellows' three rungs first: two start on the second
    cluster's first rung (its 16-GPU cap) one poll or less after three caps, the other two on its second rung one
    cap later; none goes to GCP."""
    result = simulate(blocked_fellows(), "ladder", CAP, IDLE_INST)
    assert [(o.lane, o.qos) for o in result.outcomes] == [("inst", "inst-high")] * 2 + [("inst", "inst-low")] * 2
    assert all(3 * CAP <= (o.start_seconds or 0.0) <= 3 * CAP + 10.0 for o in result.outcomes[:2])
    assert all(4 * CAP <= (o.start_seconds or 0.0) <= 4 * CAP + 10.0 for o in result.outcomes[2:])
    assert [o.rung_changes for o in result.outcomes] == [3, 3, 4, 4]


def test_static_tries_only_the_first_rung_of_each_cluster() -> None:
    """Static plays one rung per cluster: fellows' high-eur, then the second cluster's first tier (two jobs under
    its 16-GPU cap run there), then GCP for the rest after one cap on each."""
    result = simulate(blocked_fellows(), "static", CAP, IDLE_INST)
    assert [(o.lane, o.qos) for o in result.outcomes] == [("inst", "inst-high")] * 2 + [("gcp", None)] * 2
    assert all(2 * CAP <= (o.start_seconds or 0.0) <= 2 * CAP + 10.0 for o in result.outcomes[2:])


def test_with_both_clusters_full_the_job_goes_to_gcp_after_every_clusters_caps() -> None:
    """A second cluster whose only tier can never take my 8-GPU jobs (a 4-GPU per-user cap) adds its cap to the
    wait: the jobs go to GCP after fellows' three caps and its one, not sooner."""
    capped = SimParams(clusters=(ClusterParams(name="inst", gpus=32, tiers=(Tier("inst-high", 100, 4),)),))
    result = simulate(blocked_fellows(), "ladder", CAP, capped)
    assert [o.lane for o in result.outcomes] == ["gcp"] * 4
    assert all(4 * CAP <= (o.start_seconds or 0.0) <= 4 * CAP + 10.0 for o in result.outcomes)


def test_job_ids_that_collide_across_clusters_are_each_read_from_their_own_cluster() -> None:
    """Both simulated clusters number jobs from 1; a job of mine that ran on fellows and one that ran on the second
    cluster each report their own cluster's QoS and start."""
    trace = (TraceJob(0, 0.0, 64, 600.0, "bob", qos="low-eur"), TraceJob(1, 10.0, 8, 3600.0, "me"))
    result = simulate(trace, "ladder", CAP, IDLE_INST)
    (only,) = result.outcomes
    assert (only.lane, only.qos) == ("inst", "inst-high")
    assert only.start_seconds == pytest.approx(3 * CAP, abs=10.0)


def test_others_load_on_the_second_cluster_keeps_my_jobs_waiting_there() -> None:
    """Others' jobs on the second cluster, at its load, run on its own tiers and are reproducible; at load 0 there
    are none."""
    loaded = ClusterParams(name="inst", gpus=32, tiers=INST_TIERS, load=0.6)
    jobs = cluster_background(loaded, hours=24)
    assert jobs == cluster_background(loaded, hours=24)
    assert jobs
    assert {j.qos for j in jobs} <= {"inst-high", "inst-low"}
    assert not any(j.mine for j in jobs)
    offered = sum(j.gpu_hours for j in jobs) / (32 * 24)
    assert 0.3 < offered < 1.2
    assert cluster_background(ClusterParams(name="inst", gpus=32), hours=24) == ()


def test_on_the_synthetic_workload_a_second_cluster_cuts_gcp_gpu_hours_for_every_policy() -> None:
    """On the built-in workload (12 h) a second 32-GPU cluster at 0.4 load in the order lowers every policy's GCP
    GPU-hours and raises its free share, a rerun gives the same outcomes, and the table gains a column of starts per
    cluster."""
    trace = synthetic_trace(seed=1, hours=12)
    two = SimParams(clusters=(ClusterParams(name="inst", gpus=32, tiers=INST_TIERS, load=0.4),))
    policies = ("static", "ladder", "reason-aware", "oracle")
    one = {r.strategy: r for r in run_sweep(trace, strategies=policies, park_caps=(600.0,))}
    both = run_sweep(trace, strategies=policies, park_caps=(600.0,), params=two)
    assert simulate(trace, "ladder", 600.0, two) == next(r for r in both if r.strategy == "ladder")  # reproducible
    for r in both:
        assert r.gcp_gpu_hours < one[r.strategy].gcp_gpu_hours, r.strategy
        assert r.free_share > one[r.strategy].free_share, r.strategy
        assert sum(r.starts.values()) == len(r.outcomes)
    header = format_table(both).splitlines()[0].split()
    assert header[-6:] == ["on", "fellows", "on", "inst", "on", "GCP"]
    assert "on" not in format_table(tuple(one.values())).splitlines()[0].split()


def test_the_json_of_several_clusters_names_them_and_their_starts() -> None:
    """With a second cluster every record lists the clusters and my jobs started on each, then GCP; a one-cluster
    record has neither key."""
    trace = blocked_fellows()
    (two,) = json.loads(to_json(run_sweep(trace, strategies=("ladder",), park_caps=(CAP,), params=IDLE_INST)))
    (one,) = json.loads(to_json(run_sweep(trace, strategies=("ladder",), park_caps=(CAP,))))
    assert two["clusters"] == ["fellows", "inst"]
    assert two["starts"] == {"fellows": 0, "inst": 4, "gcp": 0}
    assert "clusters" not in one
    assert "starts" not in one


def test_cluster_options_give_each_cluster_its_tiers_and_fellows_the_rest() -> None:
    """``--tier NAME/...`` goes to that ``--cluster``, a tier without a cluster to fellows, a cluster without tiers
    gets one uncapped tier."""
    fellows, more = parse_cluster_options(
        ("inst:32:0.4", "uni:8"), ("high-eur:100000:16", "inst/inst-high:100:16", "inst/inst-low:10:-"), seed=3
    )
    assert fellows == (Tier("high-eur", 100_000, 16),)
    inst, uni = more
    assert (inst.name, inst.gpus, inst.load, inst.seed, inst.ladder) == ("inst", 32, 0.4, 3, ("inst-high", "inst-low"))
    assert (uni.name, uni.gpus, uni.load, uni.tiers) == ("uni", 8, 0.0, (DEFAULT_TIER,))
    assert parse_cluster_options((), ()) == ((), ())


@pytest.mark.parametrize(
    ("clusters", "tiers", "words"),
    [
        (("inst",), (), "'inst' is not NAME:GPUS"),
        (("inst:many",), (), "'inst:many' is not NAME:GPUS"),
        (("inst:8:busy",), (), "load 'busy' is not a number"),
        (("inst:0",), (), "at least one GPU"),
        (("inst:8:-1",), (), "load=-1.0"),
        (("gcp:8",), (), "cluster name 'gcp'"),
        (("fellows:8",), (), "cluster name 'fellows'"),
        (("inst:8", "inst:16"), (), "names a cluster twice"),
        (("inst:8",), ("uni/a:1:-",), "cluster 'uni', which no --cluster gives"),
        (("inst:8",), ("inst/a:1:-", "inst/a:2:-"), "lists a tier twice"),
        (("inst:8",), ("inst/a:1",), "'a:1' is not NAME:PRIORITY:CAP"),
    ],
    ids=["no-gpus", "gpus-not-a-number", "load-not-a-number", "zero-gpus", "negative-load", "gcp", "fellows",
         "twice", "tier-of-no-cluster", "tier-twice", "bad-tier"],
)  # fmt: skip
def test_bad_cluster_options_are_refused_naming_the_value(
    clusters: tuple[str, ...], tiers: tuple[str, ...], words: str
) -> None:
    """A malformed ``--cluster`` or ``--tier NAME/...`` is a ConfigError naming the offending value."""
    with pytest.raises(ConfigError, match=words):
        parse_cluster_options(clusters, tiers)


def test_two_clusters_with_a_tier_of_the_same_name_are_two_rungs() -> None:
    """A second cluster may name its tier as a fellows tier (high-eur): it is another cluster's rung, walked after
    fellows' ladder."""
    same = SimParams(clusters=(ClusterParams(name="inst", gpus=32, tiers=(FELLOWS_TIERS[0],)),))
    result = simulate(blocked_fellows(), "ladder", CAP, same)
    assert [(o.lane, o.qos) for o in result.outcomes] == [("inst", "high-eur")] * 2 + [("gcp", None)] * 2


def test_simulate_command_takes_clusters_and_splits_starts_per_cluster() -> None:
    """``fellows-fsm simulate --cluster inst:32 --tier inst/...`` prints a column of starts per cluster and GCP, and
    its JSON the starts; a malformed --cluster exits 3 with one line naming it."""
    runner = CliRunner()
    args = ["simulate", "--hours", "6", "--park-caps", "300", "--strategies", "ladder"]
    more = ["--cluster", "inst:32:0.2", "--tier", "inst/inst-high:100:16", "--tier", "inst/inst-low:10:-"]
    table = runner.invoke(main, [*args, *more])
    assert table.exit_code == 0, table.output
    assert table.output.splitlines()[0].split()[-6:] == ["on", "fellows", "on", "inst", "on", "GCP"]
    out = runner.invoke(main, [*args, *more, "--json"])
    assert out.exit_code == 0, out.output
    (record,) = json.loads(out.output)
    assert record["clusters"] == ["fellows", "inst"]
    assert sum(record["starts"].values()) == record["jobs"] - record["unstarted"]
    bad = runner.invoke(main, [*args, "--cluster", "inst"])
    assert bad.exit_code == 3
    assert "--cluster 'inst' is not NAME:GPUS[:LOAD]" in bad.output
