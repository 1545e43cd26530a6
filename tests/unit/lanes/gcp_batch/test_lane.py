"""lanes/gcp_batch/lane.py, the gcp-batch lane kind, against the loopback fake of the Batch API
(lanes/gcp_batch/fake.py) through Google's own client library: one Batch job per dispatch whatever crashes or is
retried, the create never blocking the driver, one list call a poll for every paid job of the lane, one delete, and
every refusal one line."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.cloud.batch_v1", reason="the [gcp] extra is not installed")

from fellows_fsm.config.file import Config
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.errors import ConfigError, PaidLaneError
from fellows_fsm.lanes import registry
from fellows_fsm.lanes.base import PaidLane
from fellows_fsm.lanes.gcp_batch.client import LABEL_DISPATCH, Backoff, BatchClient, BatchJobRequest
from fellows_fsm.lanes.gcp_batch.config import GcpBatchSettings
from fellows_fsm.lanes.gcp_batch.fake import FakeBatchApi, Fault
from fellows_fsm.lanes.gcp_batch.lane import CreateHandoff, GcpBatchLane
from fellows_fsm.lanes.gcp_batch.machines import machine_for
from fellows_fsm.lanes.handoff import HandoffFiles, HandoffResult, Started
from fellows_fsm.scheduler.port import JobSpec
from tests.unit.cli_helpers import SchedulingFake, refused, run, world

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("FELLOWS_GOLDEN_UPDATE") == "1"
NOW = 1_764_650_000.0
DISPATCH = "0123456789ab"
SCRIPT = "#!/bin/bash\n#SBATCH --gres=gpu:8\n#SBATCH --time=2:00:00\npython train.py\n"
TABLE: dict[str, Any] = {
    "project": "proj-1",
    "region": "us-central1",
    "zone": "us-central1-a",
    "accelerator": "nvidia-h100-80gb",
    "price_per_gpu_hour": 11.06,
}


@pytest.fixture
def fake() -> Iterator[FakeBatchApi]:
    """The fake Batch API on a loopback port, stopped after the test."""
    with FakeBatchApi() as api:
        yield api


@pytest.fixture
def slept() -> list[float]:
    """The waits the lane's create asked for between tries (recorded, never slept)."""
    return []


@pytest.fixture
def spec(tmp_path: Path) -> JobSpec:
    """An 8-GPU job of two hours whose script is in tmp_path."""
    (tmp_path / "train.sbatch").write_text(SCRIPT, encoding="utf-8")
    return JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=7200, workdir=str(tmp_path))


def settings_of(fake: FakeBatchApi | None, **keys: Any) -> GcpBatchSettings:
    """The lane ``gcp`` on the fake (or on Google, with no fake), with ``keys`` over TABLE."""
    endpoint = {} if fake is None else {"api_endpoint": fake.endpoint}
    return GcpBatchSettings.from_table("gcp", {**TABLE, **endpoint, **keys})


def lane_of(fake: FakeBatchApi | None, slept: list[float], backoff: Backoff | None = None, **keys: Any) -> GcpBatchLane:
    """A lane on the fake whose create's backoff waits are recorded in ``slept``."""
    return GcpBatchLane(settings_of(fake, **keys), sleep=slept.append, backoff=backoff)


def files_of(tmp_path: Path, dispatch_id: str = DISPATCH) -> HandoffFiles:
    """The handoff's files, prepared as the driver prepares them before it journals the handoff."""
    files = HandoffFiles(tmp_path / "handoffs", dispatch_id)
    files.prepare()
    return files


def ended(handoff: CreateHandoff) -> HandoffResult:
    """The handoff's result once its create's thread ended."""
    handoff.wait()
    result = handoff.result(NOW)
    assert result is not None
    return result


def handed(lane: GcpBatchLane, spec: JobSpec, tmp_path: Path, dispatch_id: str = DISPATCH) -> HandoffResult:
    """Start a dispatch's handoff on the lane and wait for its end."""
    return ended(lane.start(dispatch_id, spec, files_of(tmp_path, dispatch_id), now=NOW))


def make_jobs(fake: FakeBatchApi, dispatch_ids: list[str]) -> None:
    """Jobs of lane gcp for these dispatches, made straight through a client (as earlier handoffs would have)."""
    client = BatchClient.connect(settings_of(fake).location, endpoint=fake.endpoint, anonymous=True)
    for dispatch_id in dispatch_ids:
        client.create(BatchJobRequest(dispatch_id, "gcp", SCRIPT, 8, 7200), machine_for(8, "nvidia-h100-80gb"))


# --------------------------------------------------------------------------- the handoff
def test_a_handoff_creates_the_job_and_ends_with_its_name(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """The handoff, as journaled, is the create of the job it names; its create, made from the dispatch's job (its
    script's text, its GPUs), in a thread, ends exit 0 with the job's full name on stdout (also kept in the handoff's
    output file); one job in the API."""
    lane = lane_of(fake, slept)
    name = "projects/proj-1/locations/us-central1/jobs/fsm-0123456789ab"
    assert lane.command(DISPATCH, spec) == ("gcp-batch", "create", name)
    files = files_of(tmp_path)
    handoff = lane.start(DISPATCH, spec, files, now=NOW)
    assert handoff.pid is None
    result = ended(handoff)
    assert (result.exit_status, result.stdout, result.stderr) == (0, name, "")
    assert list(fake.jobs) == [name]
    assert files.stdout.read_text() == f"{name}\n"
    assert (len(fake.requests_of("create")), slept) == (1, [])
    assert "python train.py" in json.dumps(fake.requests_of("create")[0].body)


def test_a_crash_between_the_create_and_its_answer_then_adopt_is_one_job(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """The first driver's create is made but its answer lost (the handoff is lost); the next driver adopts the
    handoff, which creates again by the same name: the 409 is this dispatch's job, so the API holds ONE job."""
    fake.inject(Fault(method="create", lose_reply=True))
    first = lane_of(fake, slept, backoff=Backoff(attempts=1))
    journaled = first.command(DISPATCH, spec)
    lost = ended(first.start(DISPATCH, spec, files_of(tmp_path), now=NOW))
    assert lost.lost
    assert len(fake.jobs) == 1
    uid = next(iter(fake.jobs.values()))["uid"]

    again = lane_of(fake, slept)  # the driver after the crash: a lane built again from the journaled table
    files = HandoffFiles(tmp_path / "handoffs", DISPATCH)
    result = ended(again.adopt(DISPATCH, spec, files, Started(journaled, None, NOW)))
    assert (result.exit_status, result.stdout) == (0, again.job_name(DISPATCH))
    assert len(fake.jobs) == 1
    assert next(iter(fake.jobs.values()))["uid"] == uid
    assert len(fake.requests_of("create")) == 2


def test_a_create_answered_429_then_500_is_retried_and_makes_one_job(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """A 429 and a 500 are tried again after a doubling wait (the name keeps the create idempotent): one job."""
    fake.inject(Fault(method="create", status=429), Fault(method="create", status=500))
    result = handed(lane_of(fake, slept), spec, tmp_path)
    assert result.exit_status == 0
    assert slept == [1.0, 2.0]
    assert (len(fake.requests_of("create")), len(fake.jobs)) == (3, 1)


def test_a_403_fails_the_handoff_in_one_line_and_is_not_retried(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """A permission denied ends the handoff at once with a non-zero status and one line saying what to grant."""
    fake.inject(Fault(method="create", status=403, message="Permission 'batch.jobs.create' denied on 'proj-1'"))
    result = handed(lane_of(fake, slept), spec, tmp_path)
    assert result.exit_status == 8
    assert "\n" not in result.stderr
    assert "roles/batch.jobsEditor" in result.stderr
    assert (len(fake.requests_of("create")), slept, fake.jobs) == (1, [], {})


def test_a_gpu_count_no_machine_has_fails_the_handoff_before_any_request(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """Three H100s fit no VM: the handoff fails with the counts one VM has, and nothing reaches the API."""
    three = JobSpec(name="train", script="train.sbatch", gpus=3, workdir=spec.workdir)
    result = handed(lane_of(fake, slept), three, tmp_path)
    assert result.exit_status == 8
    assert "no GCP machine has exactly 3 nvidia-h100-80gb GPUs (one VM has 1, 2, 4, 8)" in result.stderr
    assert fake.requests == []


def test_a_journaled_command_edited_by_hand_is_never_what_is_created(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """The journaled words of a handoff are only words: a driver adopting a handoff whose journaled command was
    edited by hand (another job name, another GPU count, a command to run) creates the dispatch's own job, from its
    journaled job, and nothing of the edit reaches the API."""
    edited = ("gcp-batch", "create", "projects/p/locations/r/jobs/fsm-x", "--gpus=1", "--run=rm -rf /")
    lane = lane_of(fake, slept)
    files = files_of(tmp_path)
    result = ended(lane.adopt(DISPATCH, spec, files, Started(edited, None, NOW)))
    assert (result.exit_status, result.stdout) == (0, lane.job_name(DISPATCH))
    assert list(fake.jobs) == [lane.job_name(DISPATCH)]
    sent = json.dumps([r.body for r in fake.requests])
    assert "rm -rf" not in sent
    assert "fsm-x" not in sent


def test_a_handoff_with_no_credentials_fails_with_their_exit_code(
    slept: list[float], spec: JobSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane on Google with no application default credentials ends the handoff exit 11, saying how to log in."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    result = handed(lane_of(None, slept), spec, tmp_path)
    assert result.exit_status == 11
    assert "gcloud auth application-default login" in result.stderr


def test_a_create_the_api_holds_is_lost_and_already_has_asks_by_name(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """While the API holds the create, the handoff has no result (the driver's loop is not blocked); past the
    lane's timeout it is lost, and ``already_has`` gets the job by its name: the API has none."""
    fake.inject(Fault(method="create", hang=True), Fault(method="create", hang=True))
    lane = lane_of(fake, slept, backoff=Backoff(attempts=2), timeout_seconds=5.0)
    handoff = lane.start(DISPATCH, spec, files_of(tmp_path), now=NOW)
    assert handoff.result(NOW) is None
    lost = handoff.result(NOW + 6.0)
    assert lost is not None
    assert lost.lost
    assert "within 5 s" in lost.stderr
    assert lane.already_has(DISPATCH, spec) is False
    assert fake.requests_of("get")[-1].path.endswith("/jobs/fsm-0123456789ab")
    fake.close()  # releases the held creates: the thread's last try finds no API and ends
    handoff.wait()
    assert fake.jobs == {}


def test_already_has_is_true_for_the_dispatchs_job_and_none_when_the_api_cannot_tell(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """A job of the dispatch's name and labels is True, a job of that name with another dispatch's label False, and
    a get the API answers 500 None after ONE try (the driver's loop never waits out a backoff)."""
    lane = lane_of(fake, slept)
    make_jobs(fake, [DISPATCH, "ffff00000000"])
    assert lane.already_has(DISPATCH, spec) is True
    fake.jobs[lane.job_name("ffff00000000")]["labels"][LABEL_DISPATCH] = "someone-else"
    assert lane.already_has("ffff00000000", spec) is False
    fake.inject(Fault(method="get", status=500))
    before = len(fake.requests_of("get"))
    assert lane.already_has(DISPATCH, spec) is None
    assert (len(fake.requests_of("get")) - before, slept) == (1, [])


# --------------------------------------------------------------------------- following the paid job
def test_a_look_over_a_hundred_dispatches_is_one_list_call(fake: FakeBatchApi, slept: list[float]) -> None:
    """100 paid dispatches of the lane are looked at with exactly ONE list request, each mapped to its job."""
    ids = [f"{n:012x}" for n in range(100)]
    make_jobs(fake, ids)
    fake.move("fsm-000000000007", "RUNNING", run_seconds=42.0)
    before = len(fake.requests)
    looks = GcpBatchLane(settings_of(fake)).look(ids)
    assert [r.method for r in fake.requests[before:]] == ["list"]
    assert sorted(looks) == ids
    assert looks["000000000007"].status is PaidStatus.RUNNING
    assert looks["000000000007"].run_seconds == 42.0
    assert {look.status for d, look in looks.items() if d != "000000000007"} == {PaidStatus.QUEUED}


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("QUEUED", PaidStatus.QUEUED),
        ("SCHEDULED", PaidStatus.QUEUED),
        ("RUNNING", PaidStatus.RUNNING),
        ("SUCCEEDED", PaidStatus.SUCCEEDED),
        ("FAILED", PaidStatus.FAILED),
        ("DELETION_IN_PROGRESS", PaidStatus.CANCELLED),
        ("CANCELLED", PaidStatus.CANCELLED),
        ("STATE_UNSPECIFIED", PaidStatus.UNKNOWN),
    ],
    ids=str,
)
def test_each_batch_state_maps_to_its_paid_status(fake: FakeBatchApi, state: str, status: PaidStatus) -> None:
    """A job in each Batch state reads as its PaidStatus, with its latest event's words as the note; a state this
    lane does not know is UNKNOWN (never an end)."""
    make_jobs(fake, [DISPATCH])
    name = "projects/proj-1/locations/us-central1/jobs/fsm-0123456789ab"
    fake.jobs[name]["status"]["state"] = state
    fake.jobs[name]["status"]["statusEvents"].append({"type": "STATUS_CHANGED", "description": f"now {state}"})
    look = GcpBatchLane(settings_of(fake)).look([DISPATCH])[DISPATCH]
    assert look.status is status
    assert f"now {state}" in look.note


def test_a_dispatch_with_no_job_in_the_list_is_gone(fake: FakeBatchApi) -> None:
    """A dispatch whose job the list does not hold (deleted outside) is GONE, beside one whose job succeeded with
    its run time."""
    make_jobs(fake, [DISPATCH])
    fake.move("fsm-0123456789ab", "SUCCEEDED", run_seconds=3600.0)
    looks = GcpBatchLane(settings_of(fake)).look([DISPATCH, "aaaa00000000"])
    assert (looks[DISPATCH].status, looks[DISPATCH].run_seconds) == (PaidStatus.SUCCEEDED, 3600.0)
    assert looks["aaaa00000000"].status is PaidStatus.GONE


def test_a_look_the_api_does_not_answer_is_one_try_and_one_line(fake: FakeBatchApi, slept: list[float]) -> None:
    """A list answered 503 raises PaidLaneError in one line after ONE request and no wait (asked next poll)."""
    fake.inject(Fault(method="list", status=503, message="Service unavailable.\nLater."))
    with pytest.raises(PaidLaneError) as caught:
        lane_of(fake, slept).look([DISPATCH])
    assert "\n" not in str(caught.value)
    assert "GCP Batch did not answer list of lane gcp's jobs (project proj-1, region us-central1)" in str(caught.value)
    assert (fake.calls["list"], slept) == (1, [])


def test_delete_is_one_call_and_a_job_already_gone_is_fine(fake: FakeBatchApi, slept: list[float]) -> None:
    """A delete is one request (the job goes DELETION_IN_PROGRESS); a delete of a job already gone (404) returns
    quietly; a delete the API answers 500 raises PaidLaneError in one line, not retried."""
    lane = lane_of(fake, slept)
    make_jobs(fake, [DISPATCH])
    lane.delete(DISPATCH)
    assert fake.jobs[lane.job_name(DISPATCH)]["status"]["state"] == "DELETION_IN_PROGRESS"
    assert len(fake.requests_of("delete")) == 1
    fake.remove("fsm-0123456789ab")
    lane.delete(DISPATCH)
    assert len(fake.requests_of("delete")) == 2
    fake.inject(Fault(method="delete", status=500))
    with pytest.raises(
        PaidLaneError, match=r"GCP Batch did not answer delete of fsm-0123456789ab \(project proj-1"
    ) as caught:
        lane.delete(DISPATCH)
    assert "\n" not in str(caught.value)
    assert (len(fake.requests_of("delete")), slept) == (3, [])


def test_the_lane_is_a_paid_lane_with_its_price_and_queue_timeout(fake: FakeBatchApi) -> None:
    """The registry builds a gcp-batch table into a PaidLane that follows its jobs, with the table's price and
    queue timeout; the table written back for the journal parses to the same settings."""
    config = Config.from_mapping(
        {"lanes": {"gcp": {"kind": "gcp-batch", **TABLE, "queue_timeout_seconds": 1800}}}, source="test.toml"
    )
    settings = config.lane("gcp")
    assert registry.parse_lane("gcp", registry.lane_table(settings)) == settings
    lane = registry.handoff_lane(settings, state_dir=Path("unused"))
    assert isinstance(lane, PaidLane)
    assert (lane.follows, lane.price_per_gpu_hour, lane.queue_timeout_seconds) == (True, 11.06, 1800)
    assert not settings.walks_ladder
    assert fake.requests == []  # building a lane does no I/O


# --------------------------------------------------------------------------- the table
@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ({"price_per_gpu_hour": None}, r"\[lanes\.gcp\] price_per_gpu_hour is not set: give what one GPU-hour costs"),
        ({"price_per_gpu_hour": -2.5}, r"\[lanes\.gcp\] price_per_gpu_hour=-2\.5 must be a finite number above 0"),
        ({"price_per_gpu_hour": math.nan}, r"\[lanes\.gcp\] price_per_gpu_hour=nan must be a finite number above 0"),
        ({"price_per_gpu_hour": 0}, r"\[lanes\.gcp\] price_per_gpu_hour=0 must be a finite number above 0"),
        ({"accelerator": "nvidia-h1000"}, r"accelerator='nvidia-h1000' is not a GPU type this lane knows; use one of "),
        ({"machine_type": "zz-huge-8"}, r"machine_type='zz-huge-8' does not carry nvidia-h100-80gb GPUs; its machine"),
        ({"accelerator": "nvidia-tesla-t4"}, r"machine_type is not set: nvidia-tesla-t4 GPUs attach to an N1 machine"),
        ({"gpu_type": "h100"}, r"\[lanes\.gcp\]: unknown key 'gpu_type'; known keys are accelerator, api_endpoint, "),
        ({"api_endpoint": "https://batch.googleapis.com"}, r"api_endpoint='https://batch\.googleapis\.com' must be a"),
        ({"zone": "europe-west4-a"}, r"zone='europe-west4-a' is not a zone of region 'us-central1'"),
        ({"queue_timeout_seconds": -1}, r"\[lanes\.gcp\] queue_timeout_seconds=-1 must be a positive"),
    ],
    ids=[
        "price-missing",
        "price-negative",
        "price-nan",
        "price-zero",
        "unknown-accelerator",
        "unknown-machine-type",
        "attached-without-n1",
        "unknown-key",
        "endpoint-not-loopback",
        "zone-of-another-region",
        "queue-timeout-negative",
    ],
)
def test_a_bad_table_is_one_config_error_line(keys: dict[str, Any], said: str) -> None:
    """Each bad value of a gcp-batch table is one ConfigError line naming the lane, the key and what to give."""
    table = {key: value for key, value in {**TABLE, **keys}.items() if value is not None}
    with pytest.raises(ConfigError, match=f"^test\\.toml: .*{said}") as caught:
        Config.from_mapping({"lanes": {"gcp": {"kind": "gcp-batch", **table}}}, source="test.toml")
    assert "\n" not in str(caught.value)


def test_the_known_machine_names_are_listed_when_the_accelerator_is_unknown() -> None:
    """An unknown accelerator's line lists every accelerator the machine table knows."""
    with pytest.raises(ConfigError) as caught:
        GcpBatchSettings.from_table("gcp", {**TABLE, "accelerator": "h100"})
    assert "nvidia-h100-80gb" in str(caught.value)
    assert "nvidia-tesla-t4" in str(caught.value)


# --------------------------------------------------------------------------- the render contract
def test_the_batch_job_the_lane_sends_is_the_golden_file(
    fake: FakeBatchApi, slept: list[float], spec: JobSpec, tmp_path: Path
) -> None:
    """The create request for one fixed dispatch (path, query and JSON body) is byte for byte
    golden/gcp-batch-job.json (``FELLOWS_GOLDEN_UPDATE=1`` rewrites it)."""
    assert handed(lane_of(fake, slept), spec, tmp_path).ok
    (posted,) = fake.requests_of("create")
    rendered = json.dumps({"path": posted.path, "query": posted.query, "body": posted.body}, indent=2, sort_keys=True)
    golden = GOLDEN / "gcp-batch-job.json"
    if UPDATE:
        golden.write_text(rendered + "\n", encoding="utf-8")
    assert golden.read_text(encoding="utf-8") == rendered + "\n"


# --------------------------------------------------------------------------- submit: credentials first
GCP_BATCH_TOML = """state_dir = "{state}"
[fellows]
park_cap_seconds = 0.3
poll_interval_seconds = 0.05
[lanes.gcp]
kind = "gcp-batch"
project = "proj-1"
region = "us-central1"
accelerator = "nvidia-h100-80gb"
price_per_gpu_hour = 11.06
"""


@pytest.mark.parametrize("pin", [None, "gcp"], ids=["walks-to-gcp", "pinned-to-gcp"])
def test_submit_with_no_google_credentials_exits_11_and_queues_nothing(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch, pin: str | None
) -> None:
    """A dispatch whose order reaches a gcp-batch lane, with no application default credentials, is refused at
    submit with exit 11 in one line saying how to log in: nothing queued on SLURM, nothing journaled."""
    (env / "fellows.toml").write_text(GCP_BATCH_TOML.format(state=env / "state"), encoding="utf-8")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(env / "no-such-key.json"))
    before = world(env, scheduling_fake)
    args = ("submit", str(script)) if pin is None else ("submit", "--pin", pin, str(script))
    refused(run(*args), 11, "gcloud auth application-default login", "GOOGLE_APPLICATION_CREDENTIALS")
    assert world(env, scheduling_fake) == before
    assert scheduling_fake.jobs == {}


# --------------------------------------------------------------------------- where its logs are
def test_its_logs_are_where_google_documents_a_batch_jobs_task_logs(fake: FakeBatchApi, slept: list[float]) -> None:
    """`logs` of a dispatch on the lane is one line: the Cloud Logging filter of its job's task logs by the job's
    uid (one get); with no such job, how to read the uid instead."""
    make_jobs(fake, [DISPATCH])
    lane = GcpBatchLane(settings_of(fake))
    uid = BatchClient.connect(settings_of(fake).location, endpoint=fake.endpoint, anonymous=True).get(f"fsm-{DISPATCH}")
    assert uid is not None
    way = lane.logs(DISPATCH, None)
    assert way.argv is None
    assert 'logName="projects/proj-1/logs/batch_task_logs"' in way.where
    assert f'labels.job_uid="{uid.uid}"' in way.where
    assert f"projects/proj-1/locations/us-central1/jobs/fsm-{DISPATCH}" in way.where
    assert "\n" not in way.where
    none = lane.logs("aaaa00000000", None)
    assert "gcloud batch jobs describe fsm-aaaa00000000 --project=proj-1 --location=us-central1" in none.where
