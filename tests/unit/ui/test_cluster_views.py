"""The views name the cluster (issue 26 item 6): a dispatch that walked fellows' ladder, then the second SLURM lane
``inst``, on two fake ports; status, history, the live view, every --json, ladder, config check and the diagram."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory
from rich.console import Console, RenderableType

from fellows_fsm import FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.history import history_entries
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.snapshot import Snapshot, dispatch_json, journaled
from fellows_fsm.journal.store import Journal
from fellows_fsm.slurm.accounting import Association, Grants, QosInfo
from fellows_fsm.ui import app as ui_app
from fellows_fsm.ui import tools
from fellows_fsm.ui.app import next_lane_of
from fellows_fsm.ui.follow import summary
from fellows_fsm.ui.history import history_table
from fellows_fsm.ui.ladder import ladder_report, ladder_table
from fellows_fsm.ui.live import dispatch_panel, watch_table
from fellows_fsm.ui.paths import path_mermaid
from fellows_fsm.ui.snapshot import left_ladder
from fellows_fsm.ui.status import status_table
from tests.unit.cli_helpers import LADDER_GRANTS, run
from tests.unit.driver.fixtures import PRIORITY, ledger_lane

CAP = 60.0
INST_CAP = 120.0
SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)
INST = SlurmSettings(name="inst", qos="inst-high", qos_ladder=("inst-low",), park_cap_seconds=INST_CAP, host="inst")
INST_GRANTS = Grants(
    user="me",
    associations=(Association("inst", "inst-acct", "me", "", frozenset({"inst-high", "inst-low"}), "inst-low"),),
    qos={"inst-high": QosInfo("inst-high", 10, 86400, 8), "inst-low": QosInfo("inst-low", 1, 3 * 86400, None)},
)


def text(renderable: RenderableType) -> str:
    """What ``renderable`` prints on a 200-column console, without styles."""
    console = Console(file=io.StringIO(), width=200)
    console.print(renderable)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


def two_clusters(tmp_path: Path) -> Config:
    """fellows, then inst, then the gcp ledger lane."""
    return Config(
        fellows=SlurmSettings(park_cap_seconds=CAP),
        lanes=(INST, ledger_lane("gcp", tmp_path / "gcp.ledger")),
        router=RouterConfig(order=("fellows", "inst", "gcp")),
        state_dir=tmp_path,
    )


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    """Frozen time for the router's clock."""
    with freeze_time("2026-11-30 12:00:00") as f:
        yield f


@pytest.fixture
def inst(frozen: FrozenDateTimeFactory) -> FakeScheduler:
    """The second cluster, no GPU free until a test frees it; it numbers jobs from 1000 like fellows."""
    return FakeScheduler(qos_priority={"inst-high": 2, "inst-low": 1}, total_gpus=0)


@pytest.fixture
def router(tmp_path: Path, frozen: FrozenDateTimeFactory, inst: FakeScheduler) -> Iterator[Router]:
    """A started router over both clusters; fellows has no GPU free, so every dispatch walks on to inst."""
    fellows = FakeScheduler(qos_priority=PRIORITY, total_gpus=0)
    config = two_clusters(tmp_path)
    journal = Journal(config.journal_path)
    yield Router(config, fellows, journal, ports={"inst": inst}).start()
    journal.close()


def walk_to_inst(router: Router, frozen: FrozenDateTimeFactory, *, run: bool, inst: FakeScheduler) -> str:
    """Dispatch SPEC, walk fellows' three rungs to inst's first; with ``run`` the job starts there."""
    h = router.dispatch(SPEC)
    for _ in range(3 * int(CAP / 5) + 6):
        frozen.tick(5)
        router.poll()
    assert router.handle(h.dispatch_id).qos == "inst-high"
    if run:
        inst.total_gpus = 8
        inst.schedule()
        frozen.tick(5)
        router.poll()
        assert router.handle(h.dispatch_id).state == "RUNNING"
    return h.dispatch_id


def row_of(router: Router, dispatch_id: str) -> DispatchRow:
    """The dispatch's journal row."""
    row = router.journal.dispatch(dispatch_id)
    assert row is not None
    return row


def test_status_json_names_the_cluster_and_the_bare_slurm_id(
    router: Router, frozen: FrozenDateTimeFactory, inst: FakeScheduler
) -> None:
    """status --json of a job running on inst says cluster inst, the job id as the journal keeps it (1000@inst),
    and SLURM's own id there (1000)."""
    dispatch_id = walk_to_inst(router, frozen, run=True, inst=inst)
    out = dispatch_json(row_of(router, dispatch_id))
    assert (out["qos"], out["cluster"], out["slurm_job_id"], out["cluster_job_id"]) == (
        "inst-high",
        "inst",
        "1000@inst",
        "1000",
    )


def test_the_submit_summary_names_the_cluster_it_runs_on(
    router: Router, frozen: FrozenDateTimeFactory, inst: FakeScheduler
) -> None:
    """submit's last line says the job runs on inst-high@inst as SLURM job 1000@inst."""
    dispatch_id = walk_to_inst(router, frozen, run=True, inst=inst)
    assert summary(dispatch_id, router.journal) == (
        f"dispatch {dispatch_id} is RUNNING on inst-high@inst as SLURM job 1000@inst"
    )


def test_status_json_of_a_fellows_job_names_fellows(router: Router) -> None:
    """A dispatch pending on fellows' first rung says cluster fellows, its job id unchanged."""
    h = router.dispatch(SPEC)
    out = dispatch_json(row_of(router, h.dispatch_id))
    assert (out["cluster"], out["slurm_job_id"], out["cluster_job_id"]) == ("fellows", "1000", "1000")


def test_status_table_names_the_cluster_of_each_dispatch(
    router: Router, frozen: FrozenDateTimeFactory, inst: FakeScheduler
) -> None:
    """status shows RUNNING(inst-high@inst) and a cluster column: inst for the job there, fellows for the other."""
    on_inst = walk_to_inst(router, frozen, run=True, inst=inst)
    on_fellows = router.dispatch(SPEC).dispatch_id
    rows = [row_of(router, on_inst), row_of(router, on_fellows)]
    shown = text(status_table([Snapshot.of_row(r) for r in rows], updated={}))
    assert "RUNNING(inst-high@inst)" in shown
    header = next(line for line in shown.splitlines() if "dispatch" in line)
    assert header.split() == ["dispatch", "name", "state", "cluster", "job", "updated"]
    line_inst = next(line for line in shown.splitlines() if on_inst in line)
    line_fellows = next(line for line in shown.splitlines() if on_fellows in line)
    assert line_inst.split()[3:5] == ["inst", "1000@inst"]
    assert line_fellows.split()[3] == "fellows"
    listed = text(status_table(router.journal.listings(), updated={}))  # status --all reads no ladder JSON
    assert "RUNNING(inst-high@inst)" in listed
    assert next(line for line in listed.splitlines() if on_inst in line).split()[3] == "inst"


def test_status_table_of_one_cluster_has_no_cluster_column(tmp_path: Path, frozen: FrozenDateTimeFactory) -> None:
    """A journal whose dispatches are all on fellows shows the same columns, and the same JSON keys, as before
    clusters existed."""
    journal = Journal(tmp_path / "j.db")
    r = Router(Config(state_dir=tmp_path), FakeScheduler(total_gpus=0), journal).start()
    h = r.dispatch(SPEC)
    row = journal.dispatch(h.dispatch_id)
    assert row is not None
    header = next(
        line for line in text(status_table([Snapshot.of_row(row)], updated={})).splitlines() if "name" in line
    )
    assert header.split() == ["dispatch", "name", "state", "job", "updated"]
    assert not {"cluster", "cluster_job_id"} & dispatch_json(row).keys()
    journal.close()


def test_a_rung_is_found_by_its_cluster_when_two_clusters_share_a_qos_name(tmp_path: Path) -> None:
    """A row pending on inst's own 'high-eur' is on rung 4 of 5 (inst's), not on fellows' high-eur."""
    ladder = Ladder.joined(
        (SlurmSettings(park_cap_seconds=CAP).ladder, Ladder((Rung(0, "high-eur", INST_CAP, lane="inst"),)))
    )
    journal = Journal(tmp_path / "j.db")
    journal.add_dispatch("d1", SPEC, ladder, pinned=False, intent="prod", at=1.0)
    row = journal.dispatch("d1")
    assert row is not None
    row = attrs.evolve(row, state="RUNNING", label="RUNNING", qos="high-eur", job_id="1000@inst")
    snap = Snapshot.of_row(row)
    assert (snap.rung_index, snap.cluster) == (3, "inst")
    assert dispatch_json(row)["cluster"] == "inst"
    journal.close()


def test_history_names_the_cluster_of_every_step(
    router: Router, frozen: FrozenDateTimeFactory, inst: FakeScheduler
) -> None:
    """history (and --json) names fellows for the three fellows rungs' steps and inst for inst's, with SLURM's own
    id beside the journal's; the table has a cluster column."""
    dispatch_id = walk_to_inst(router, frozen, run=True, inst=inst)
    row = row_of(router, dispatch_id)
    j = router.journal
    entries = history_entries(row, j.steps(dispatch_id), j.jobs(dispatch_id), j.handoff(dispatch_id))
    submits = [e for e in entries if e.trigger in ("submit", "resubmit")]
    assert [(e.cluster, e.qos) for e in submits] == [
        ("fellows", "high-eur"),
        ("fellows", "normal-eur"),
        ("fellows", "low-eur"),
        ("inst", "inst-high"),
    ]
    last = entries[-1].as_json()
    assert (last["to"], last["cluster"], last["slurm_job_id"], last["cluster_job_id"]) == (
        "RUNNING",
        "inst",
        "1000@inst",
        "1000",
    )
    shown = text(history_table(row, entries))
    header = next(line for line in shown.splitlines() if "trigger" in line)
    assert header.split()[:6] == ["time", "trigger", "to", "cluster", "QoS", "job"]
    resubmit_inst = next(line for line in shown.splitlines() if "inst-high" in line and "resubmit" in line)
    assert resubmit_inst.split()[1:6] == ["resubmit", "RESUBMITTED", "inst", "inst-high", "1000@inst"]


def test_history_table_of_one_cluster_has_no_cluster_column(tmp_path: Path, frozen: FrozenDateTimeFactory) -> None:
    """A dispatch that only ever walked fellows shows the history columns, and the JSON keys, it always had."""
    journal = Journal(tmp_path / "j.db")
    r = Router(Config(state_dir=tmp_path), FakeScheduler(total_gpus=0), journal).start()
    h = r.dispatch(SPEC)
    row = journal.dispatch(h.dispatch_id)
    assert row is not None
    entries = history_entries(row, journal.steps(row.id), journal.jobs(row.id), None)
    assert entries[0].cluster == "fellows"
    header = next(line for line in text(history_table(row, entries)).splitlines() if "trigger" in line)
    assert header.split() == ["time", "trigger", "to", "QoS", "job", "reason,", "note"]
    assert not {"cluster", "cluster_job_id"} & entries[0].as_json().keys()
    journal.close()


def test_the_live_view_shows_the_rung_on_inst_and_the_paid_lane_after_it(
    router: Router, frozen: FrozenDateTimeFactory, inst: FakeScheduler
) -> None:
    """Pending on inst: the panel's ladder line marks inst-high@inst, ends at gcp (not at inst), says the cluster,
    and counts down to gcp; the watch table's QoS says inst-high@inst."""
    dispatch_id = walk_to_inst(router, frozen, run=False, inst=inst)
    assert next_lane_of(router.config) == "gcp"
    snap = journaled(router.journal, row_of(router, dispatch_id))
    assert snap.cluster == "inst"
    assert not left_ladder(snap)
    shown = text(dispatch_panel(snap, now=time.time(), next_lane=next_lane_of(router.config)))
    assert "high-eur ✗ → normal-eur ✗ → low-eur ✗ → inst-high@inst ● → inst-low@inst → gcp" in shown
    assert "rung 4 of 5" in shown
    assert any(line.split()[1:3] == ["cluster", "inst"] for line in shown.splitlines() if "cluster" in line)
    assert "gcp in" in shown
    table = text(watch_table([snap], now=time.time(), next_lane="gcp"))
    assert "inst-high@inst" in table


def test_ladder_shows_each_clusters_grants_and_its_rungs(tmp_path: Path) -> None:
    """ladder judges fellows' rungs on fellows' grants and inst's on inst's: a table of grants per cluster, every
    rung with its cluster, and JSON with each rung's cluster and each cluster's grants."""
    config = two_clusters(tmp_path)
    report = ladder_report(config, LADDER_GRANTS, SPEC, clusters={"inst": INST_GRANTS})
    out = report.as_json()
    assert [(r["cluster"], r["qos"], r["usable"]) for r in out["ladder"]] == [
        ("fellows", "high-eur", True),
        ("fellows", "normal-eur", True),
        ("fellows", "low-eur", True),
        ("inst", "inst-high", True),
        ("inst", "inst-low", True),
    ]
    assert [(c["cluster"], [g["name"] for g in c["granted"]]) for c in out["clusters"]] == [
        ("fellows", ["high-eur", "low-eur", "normal-eur"]),
        ("inst", ["inst-high", "inst-low"]),
    ]
    assert out["worst_case_seconds"] == 3 * CAP + 2 * INST_CAP
    assert out["warnings"] == []
    shown = text(ladder_table(report))
    assert "QoS granted to me on fellows" in shown
    assert "QoS granted to me on inst" in shown
    line = next(line for line in shown.splitlines() if "inst-low" in line and "usable" in line)
    assert line.replace("│", " ").split()[:3] == ["5", "inst", "inst-low"]


def test_ladder_names_the_cluster_that_does_not_grant_a_rung(tmp_path: Path) -> None:
    """A QoS inst does not grant is a warning naming inst, judged on inst's grants, never on fellows'."""
    config = two_clusters(tmp_path)
    only_high = Grants(
        user="me",
        associations=(Association("inst", "a", "me", "", frozenset({"inst-high"}), "inst-high"),),
        qos={"inst-high": INST_GRANTS.qos["inst-high"]},
    )
    out = ladder_report(config, LADDER_GRANTS, SPEC, clusters={"inst": only_high}).as_json()
    assert [r["usable"] for r in out["ladder"]] == [True, True, True, True, False]
    assert any("inst-low" in w and "inst" in w.split("inst-low", 1)[1] for w in out["warnings"])


def test_config_check_shows_the_whole_order_and_the_worst_case(tmp_path: Path) -> None:
    """config check lists every cluster's rungs with their caps, then the paid lane, and the worst case before it is
    the sum of every cluster's caps."""
    shown = text(tools._config_view(two_clusters(tmp_path)))
    rungs = [line.replace("│", " ").split() for line in shown.splitlines() if "SUBMITTED" in line]
    assert [r[:5] for r in rungs] == [
        ["1", "fellows", "high-eur", "1m", "00s"],
        ["2", "fellows", "normal-eur", "1m", "00s"],
        ["3", "fellows", "low-eur", "1m", "00s"],
        ["4", "inst", "inst-high", "2m", "00s"],
        ["5", "inst", "inst-low", "2m", "00s"],
    ]
    worst = next(line for line in shown.splitlines() if "worst case" in line)
    assert "7m" in worst
    assert "before gcp" in worst
    assert "inst over ssh" in shown


def test_the_diagram_of_a_dispatch_shows_its_path_across_clusters(
    router: Router, frozen: FrozenDateTimeFactory, inst: FakeScheduler
) -> None:
    """diagram --dispatch marks inst's rung as visited and its title names the clusters the path crossed (mermaid's
    own parser checks such a path in test_mermaid_valid.py, which needs Node.js: the host's suite runs it)."""
    dispatch_id = walk_to_inst(router, frozen, run=True, inst=inst)
    row = row_of(router, dispatch_id)
    j = router.journal
    entries = history_entries(row, j.steps(dispatch_id), j.jobs(dispatch_id), None)
    ladder = Ladder(tuple(Rung(**r) for r in row.ladder))
    title = tools.diagram_title(row, entries)
    assert title == f"dispatch {dispatch_id} · fellows → inst"
    out = path_mermaid(ladder, entries, title=title)
    visited = next(line for line in out.splitlines() if line.strip().startswith("class ") and "visited" in line)
    assert "RESUBMITTED_inst__inst_high" in visited
    assert 'state "RESUBMITTED(inst-high@inst) · ' in out


INST_TABLE = """
[lanes.inst]
kind = "slurm"
host = "inst"
qos = "inst-high"
qos_ladder = ["inst-low"]
park_cap_seconds = 120

[router]
order = ["fellows", "inst", "gcp"]
follow_interval_seconds = 0.05
"""


def test_the_ladder_and_config_check_commands_read_every_cluster(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fellows-fsm ladder --json reads inst's grants through inst's own port and judges inst's rungs on them;
    config check prints every cluster's rungs and the worst case before gcp (exit 0)."""
    config = env / "fellows.toml"
    own = config.read_text(encoding="utf-8").replace("\n[router]\nfollow_interval_seconds = 0.05\n", "")
    config.write_text(own + INST_TABLE, encoding="utf-8")  # (its [router] table in place of the env's)
    inst_port = FakeScheduler()
    asked: list[str] = []

    def lane_port(config: Config, lane: SlurmSettings) -> FakeScheduler:
        asked.append(lane.name)
        return inst_port

    monkeypatch.setattr(ui_app, "make_lane_scheduler", lane_port)
    monkeypatch.setattr(ui_app, "read_grants", lambda port: INST_GRANTS if port is inst_port else LADDER_GRANTS)
    result = run("ladder", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert asked == ["inst"]
    assert [(r["cluster"], r["qos"], r["usable"]) for r in out["ladder"]][3:] == [
        ("inst", "inst-high", True),
        ("inst", "inst-low", True),
    ]
    assert out["worst_case_seconds"] == pytest.approx(3 * 0.3 + 2 * 120)
    checked = run("config", "check")
    assert checked.exit_code == 0, checked.output
    assert "RESUBMITTED(inst-low@inst)" in checked.stdout
    assert "before gcp (the sum of every cluster's park caps)" in " ".join(checked.stdout.split())
