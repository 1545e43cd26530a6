"""`fellows-fsm ladder` (ui/ladder.py): the configured ladder judged against the cluster's grants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.cli_helpers import run


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        ((), None),
        (("--gpus", "32"), "skipping high-eur"),
        (("--time", "10-00:00:00"), "MaxWall"),
    ],
    ids=["fits-everywhere", "over-per-user-cap", "over-max-wall"],
)
def test_ladder_json_reports_grants_rungs_and_warnings(env: Path, args: tuple[str, ...], warning: str | None) -> None:
    """ladder --json shows the granted QoS, each rung with its verdict, and why a job could never fit."""
    result = run("ladder", "--json", *args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {"user", "granted", "ladder", "warnings", "worst_case_seconds"} <= out.keys()
    assert [r["qos"] for r in out["ladder"]] == ["high-eur", "normal-eur", "low-eur"]
    assert out["worst_case_seconds"] == pytest.approx(0.9)
    if warning is None:
        assert out["warnings"] == []
        assert all(r["usable"] for r in out["ladder"])
    else:
        assert any(warning in w for w in out["warnings"])
        assert not out["ladder"][0]["usable"]


def test_ladder_warns_about_an_ungranted_qos(env: Path) -> None:
    """A QoS in qos_ladder that the user is not granted is a warning in the table, not a crash."""
    toml = (
        (env / "fellows.toml")
        .read_text()
        .replace("[fellows]\n", "[fellows]\nqos_ladder = ['normal-eur', 'gold-eur']\n")
    )
    (env / "fellows.toml").write_text(toml)
    result = run("ladder")
    assert result.exit_code == 0, result.output
    assert "gold-eur is on the ladder but not granted" in " ".join(result.stdout.split())
