"""The views name the cluster, on the real local SLURM: a second SLURM lane ``inst`` on the same slurmctld (its own
``slurm_conf``, its own QoS dev-eur), reached after fellows' one capped rung parks out."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fellows_fsm.api import Fellows
from fellows_fsm.config.file import load_config

from .cli_harness import cli, json_of, ledger_config, submit_args
from .conftest import Cluster

pytestmark = pytest.mark.slurm

CAP = 3.0


def wide() -> dict[str, str]:
    """This environment (read now: SLURM_CONF is the cluster fixture's) at a width that shows every table column
    whole, whatever the caller's says: in a whole-suite run the table once came out 80 columns wide and cut the
    state cell (cause not found; the file alone, with COLUMNS=80 exported too, printed it whole)."""
    return {**os.environ, "COLUMNS": "200"}


def _config(slurm: Cluster, tmp_path: Path) -> Path:
    """fellows with high-eur alone (3 s cap), then the lane inst on the same cluster with dev-eur, then gcp."""
    config = ledger_config(
        tmp_path,
        cap=CAP,
        poll=0.5,
        fellows="qos_ladder = []\n",
        router='order = ["fellows", "inst", "gcp"]\n',
    )
    inst = (
        f'\n[lanes.inst]\nkind = "slurm"\nslurm_conf = "{slurm.slurm_conf}"\nqos = "dev-eur"\npark_cap_seconds = 60\n'
    )
    config.write_text(config.read_text(encoding="utf-8") + inst, encoding="utf-8")
    return config


def test_the_views_name_the_second_lane_of_a_walk_driven_in_process(slurm: Cluster, tmp_path: Path) -> None:
    """high-eur full, a walk driven in this process parks out of fellows and runs on inst's dev-eur; then the
    command line's read-only views (no driver needed: RUNNING is final) name inst: status --json (cluster, SLURM's
    own id beside <id>@inst), history --json (fellows, then inst), status (RUNNING(dev-eur@inst)) and ladder --json
    (both lanes' grants, sacctmgr through each one's port)."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(slurm, tmp_path)
    with Fellows(load_config(config)) as fellows:
        handle = fellows.submit(slurm.spec()).handle  # (checked against each lane's grants: the same cluster's here)
        final = fellows.follow(handle.dispatch_id, sleep=lambda s: time.sleep(min(s, 0.5)))
    assert (final.state, final.qos) == ("RUNNING", "dev-eur")

    [out] = json_of(cli(config, "status", handle.dispatch_id, "--json", timeout=60))
    assert (out["state"], out["qos"], out["cluster"]) == ("RUNNING", "dev-eur", "inst")
    assert out["slurm_job_id"] == f"{out['cluster_job_id']}@inst"
    running = [r for r in slurm.queue() if r.job_id == out["cluster_job_id"]]
    assert [(r.qos, r.state) for r in running] == [("dev-eur", "RUNNING")]

    history = json_of(cli(config, "history", handle.dispatch_id, "--json", timeout=60))
    submits = [(h["cluster"], h["qos"]) for h in history if h["trigger"] in ("submit", "resubmit")]
    assert submits == [("fellows", "high-eur"), ("inst", "dev-eur")]

    shown = cli(config, "status", handle.dispatch_id, timeout=60, env=wide())
    assert shown.returncode == 0, shown.stderr
    assert "RUNNING(dev-eur@inst)" in shown.stdout

    ladder = json_of(cli(config, "ladder", "--json", timeout=60))
    assert [(r["cluster"], r["qos"], r["usable"]) for r in ladder["ladder"]] == [
        ("fellows", "high-eur", True),
        ("inst", "dev-eur", True),
    ]
    assert [c["cluster"] for c in ladder["clusters"]] == ["fellows", "inst"]


def test_a_job_that_runs_on_the_second_lane_is_named_by_its_cluster(slurm: Cluster, tmp_path: Path) -> None:
    """high-eur full, the job parks out of fellows and runs on inst's dev-eur: status --json says cluster inst and
    SLURM's own id beside <id>@inst, history --json names fellows then inst, status says RUNNING(dev-eur@inst), and
    ladder --json reads both lanes' grants (sacctmgr through each one's port)."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(slurm, tmp_path)
    out = json_of(cli(config, *submit_args(slurm, "--json"), timeout=90))
    assert (out["state"], out["qos"], out["cluster"]) == ("RUNNING", "dev-eur", "inst")
    assert out["slurm_job_id"] == f"{out['cluster_job_id']}@inst"
    running = [r for r in slurm.queue() if r.job_id == out["cluster_job_id"]]
    assert [(r.qos, r.state) for r in running] == [("dev-eur", "RUNNING")]

    history = json_of(cli(config, "history", out["dispatch_id"], "--json", timeout=60))
    submits = [(h["cluster"], h["qos"]) for h in history if h["trigger"] in ("submit", "resubmit")]
    assert submits == [("fellows", "high-eur"), ("inst", "dev-eur")]

    shown = cli(config, "status", out["dispatch_id"], timeout=60, env=wide())
    assert shown.returncode == 0, shown.stderr
    assert "RUNNING(dev-eur@inst)" in shown.stdout

    ladder = json_of(cli(config, "ladder", "--json", timeout=60))
    assert [(r["cluster"], r["qos"], r["usable"]) for r in ladder["ladder"]] == [
        ("fellows", "high-eur", True),
        ("inst", "dev-eur", True),
    ]
    assert [c["cluster"] for c in ladder["clusters"]] == ["fellows", "inst"]
