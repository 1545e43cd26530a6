"""A job the [budget] can never pay for (issue 41 item 7): `submit` says so at once, naming the key; on the ladder it
walks the free rungs only, pinned to the paid lane it is refused with nothing queued."""

from __future__ import annotations

import json
from pathlib import Path

from fellows_fsm.config.file import load_config
from fellows_fsm.journal.store import Journal
from tests.unit.cli_helpers import SchedulingFake, _toml, ledger, one_error_line, run


def _budget(env: Path, on_budget: str = "wait") -> None:
    """The env's config with a per-job cap of 4 paid GPU-hours."""
    text = _toml(env) + f'\n[budget]\nmax_paid_gpu_hours_per_job = 4\non_budget = "{on_budget}"\n'
    (env / "fellows.toml").write_text(text, encoding="utf-8")


def test_a_walk_that_can_never_be_paid_is_told_at_submit(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """8 GPUs for an hour against a 4 GPU-hour cap: submit notes on stderr that it can never be handed to gcp, names
    the key, and the dispatch walks the free rungs (queued on high-eur)."""
    _budget(env)
    scheduling_fake.scheduling = False
    result = run("submit", "--detach", str(script))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "can never be handed to lane gcp" in line]
    assert len(notes) == 1, result.stderr
    assert "max_paid_gpu_hours_per_job = 4" in notes[0]
    assert "until [budget] changes" in notes[0]
    [row] = json.loads(run("status", result.stdout.strip(), "--json").stdout)
    assert row["qos"] == "high-eur"


def test_a_pin_to_the_paid_lane_that_can_never_be_paid_is_refused(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """submit --pin gcp of the same job under on_budget = "wait" (where it would wait for ever): exit 12, one line
    naming the key and the lane, nothing journaled or run."""
    _budget(env)
    result = run("submit", "--pin", "gcp", str(script))
    assert result.exit_code == 12
    line = one_error_line(result)
    assert "max_paid_gpu_hours_per_job = 4" in line
    assert "lane gcp can never run it" in line
    assert ledger(env) == []
    with Journal(load_config().journal_path, readonly=True) as journal:
        assert journal.listings() == []


def test_a_job_the_budget_can_pay_gets_no_note(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """Under the cap (8 GPUs for 20 minutes: 2.7 GPU-hours) submit says nothing of the budget."""
    _budget(env)
    scheduling_fake.scheduling = False
    result = run("submit", "--detach", "--time", "20:00", str(script))
    assert result.exit_code == 0, result.output
    assert "can never" not in result.stderr
