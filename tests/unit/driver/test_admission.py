"""The preflight (preflight.py) through submit: a ladder the cluster's grants refuse or a job no rung fits is
refused before anything is queued; skipped rungs and the grants cache; the debug-intent warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fellows_fsm.errors import SchedulerError
from fellows_fsm.slurm.accounting import Grants
from fellows_fsm.ui import app as ui_app
from tests.unit.cli_helpers import GRANTS, SchedulingFake, _toml, ledger, refused, run, world


def test_ungranted_qos_is_refused_before_anything_is_queued(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A QoS on the ladder that the cluster does not grant exits 3 naming it; nothing queued, journal unchanged."""
    (env / "fellows.toml").write_text(_toml(env, fellows="debug_qos = 'dev-eur'"))
    before = world(env, scheduling_fake)
    refused(run("submit", "--intent", "debug", str(script)), 3, "'dev-eur'", "not granted", "granted:")
    assert world(env, scheduling_fake) == before


def test_unknown_qos_is_refused_before_anything_is_queued(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A QoS the cluster does not have exits 3 naming it and the cluster's QoS; nothing queued."""
    (env / "fellows.toml").write_text(_toml(env, fellows="qos_ladder = ['normal-eur', 'gold-eur']"))
    before = world(env, scheduling_fake)
    refused(run("submit", str(script)), 3, "'gold-eur'", "does not exist on this cluster")
    assert world(env, scheduling_fake) == before


def test_a_rung_that_can_never_fit_is_skipped_with_the_reason_in_history(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A job over the MaxWall of high-eur and normal-eur starts on low-eur; the first step says why."""
    result = run("submit", "--json", "--time", "10-00:00:00", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["qos"]) == ("RUNNING", "low-eur")
    assert [j.qos for j in scheduling_fake.jobs.values()] == ["low-eur"]
    assert "skipping high-eur" in result.stderr
    steps = json.loads(run("history", out["dispatch_id"], "--json").stdout)
    assert steps[0]["to"] == "SUBMITTED(low-eur)"
    assert "skipping high-eur: the job's --time 10-00:00:00 is over its MaxWall" in steps[0]["note"]
    assert "skipping normal-eur" in steps[0]["note"]


def test_a_job_that_fits_no_rung_is_refused_before_any_paid_lane(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A job over every rung's MaxWall exits 5 saying so; nothing queued, the gcp command never runs."""
    before = world(env, scheduling_fake)
    refused(run("submit", "--time", "20-00:00:00", str(script)), 5, "no rung", "--pin gcp", "MaxWall")
    assert world(env, scheduling_fake) == before
    assert ledger(env) == []


def test_pinned_rung_that_can_never_fit_is_refused(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--pin fellows with a job over high-eur's per-user GPU cap exits 5 naming high-eur; nothing queued."""
    before = world(env, scheduling_fake)
    refused(run("submit", "--pin", "fellows", "--gpus", "32", str(script)), 5, "--pin fellows", "high-eur")
    assert world(env, scheduling_fake) == before


def test_a_burst_of_submits_reads_the_grants_once(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three submits in a row make one grants read; the cache file lives in the state dir."""
    reads: list[object] = []

    def counting(scheduler: object) -> Grants:
        reads.append(scheduler)
        return GRANTS

    monkeypatch.setattr(ui_app, "read_grants", counting)
    scheduling_fake.scheduling = False
    for _ in range(3):
        assert run("submit", "--detach", str(script)).exit_code == 0
    assert len(reads) == 1
    assert (env / "state" / "grants.json").exists()


def test_unreadable_grants_warn_and_submit_unchecked(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When sacctmgr fails, submit warns on stderr and dispatches on the configured ladder."""

    def failing(scheduler: object) -> Grants:
        raise SchedulerError("sacctmgr: slurmdbd is down")

    monkeypatch.setattr(ui_app, "read_grants", failing)
    result = run("submit", "--json", str(script))
    assert result.exit_code == 0, result.output
    assert "could not read what the cluster grants (sacctmgr: slurmdbd is down)" in result.stderr
    assert json.loads(result.stdout)["qos"] == "high-eur"


def test_debug_intent_without_debug_qos_warns(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--intent debug with no debug_qos warns that it walks the production ladder without the D_ prefix."""
    result = run("submit", "--intent", "debug", "--json", str(script))
    assert result.exit_code == 0, result.output
    assert "warning: --intent debug, but [fellows] debug_qos is not set" in result.stderr
    assert "'D_'" in result.stderr


def test_a_refused_debug_job_still_gets_the_debug_warning_first(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """--intent debug without debug_qos warns before the refusal of a job no rung fits (exit 5), nothing queued."""
    result = run("submit", "--intent", "debug", "--time", "20-00:00:00", str(script))
    assert result.exit_code == 5
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("fellows-fsm: warning: --intent debug, but [fellows] debug_qos is not set")
    assert lines[-1].startswith("fellows-fsm: error: no rung")
    assert scheduling_fake.jobs == {}
