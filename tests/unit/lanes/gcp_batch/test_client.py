"""lanes/gcp_batch/client.py against the loopback fake of the Batch API (lanes/gcp_batch/fake.py), through Google's own
client library: one job per dispatch whatever is retried, the lane's jobs in one list call, faults retried or not,
and every failure one plain line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("google.cloud.batch_v1", reason="the [gcp] extra is not installed")

from fellows_fsm.errors import CredentialsMissing
from fellows_fsm.lanes.gcp_batch.client import (
    LABEL_DISPATCH,
    LABEL_LANE,
    Backoff,
    BatchClient,
    BatchJobRequest,
    BatchLocation,
    check_credentials,
)
from fellows_fsm.lanes.gcp_batch.errors import BatchError, BatchRefused, BatchUnavailable
from fellows_fsm.lanes.gcp_batch.fake import FakeBatchApi, Fault
from fellows_fsm.lanes.gcp_batch.machines import Machine, machine_for
from fellows_fsm.scheduler.port import JobSpec

WHERE = BatchLocation("proj-1", "us-central1", zone="us-central1-a")
H100x8 = machine_for(8, "nvidia-h100-80gb")


@pytest.fixture
def fake() -> Iterator[FakeBatchApi]:
    """The fake Batch API on a loopback port, stopped after the test."""
    with FakeBatchApi() as api:
        yield api


@pytest.fixture
def slept() -> list[float]:
    """The waits the client asked for between tries (recorded, never slept)."""
    return []


def client_of(fake: FakeBatchApi, slept: list[float], **kwargs: object) -> BatchClient:
    """A client of the fake, anonymous, whose backoff waits are recorded in ``slept``."""
    return BatchClient.connect(WHERE, endpoint=fake.endpoint, anonymous=True, sleep=slept.append, **kwargs)


def request(dispatch_id: str = "0123456789ab", lane: str = "gcp", gpus: int = 8) -> BatchJobRequest:
    """A dispatch's job: an 8-GPU script with a two-hour limit."""
    return BatchJobRequest(dispatch_id, lane, "#!/bin/bash\nnvidia-smi\n", gpus, time_limit_seconds=7200)


def test_create_makes_the_dispatchs_job_from_its_script_gpus_and_time_limit(
    fake: FakeBatchApi, slept: list[float]
) -> None:
    """A create is one POST with jobId fsm-<dispatch id>; the job holds the script as its runnable, the GPUs on the
    machine the count maps to, the time limit as maxRunDuration, the zone, and the lane and dispatch labels."""
    job = client_of(fake, slept).create(request(), H100x8)
    assert (job.job_id, job.state, job.name) == ("fsm-0123456789ab", "QUEUED", f"{WHERE.parent}/jobs/fsm-0123456789ab")
    (posted,) = fake.requests_of("create")
    assert posted.query["jobId"] == "fsm-0123456789ab"
    assert posted.query["requestId"]  # the API's own retry guard, beside the name
    body = posted.body or {}
    task = body["taskGroups"][0]["taskSpec"]
    assert task["runnables"] == [{"script": {"text": "#!/bin/bash\nnvidia-smi\n"}}]
    assert task["maxRunDuration"] == "7200s"
    instance = body["allocationPolicy"]["instances"][0]
    assert instance["policy"]["machineType"] == "a3-highgpu-8g"
    assert instance["policy"]["accelerators"] == [{"type": "nvidia-h100-80gb", "count": "8"}]
    assert instance["installGpuDrivers"] is True
    assert body["allocationPolicy"]["location"]["allowedLocations"] == ["zones/us-central1-a"]
    assert body["labels"] == {LABEL_LANE: "gcp", LABEL_DISPATCH: "0123456789ab"}
    assert slept == []


def test_a_job_request_reads_the_script_the_spec_names(tmp_path: Path) -> None:
    """``BatchJobRequest.from_spec`` reads the script's text from the job's directory, with its GPUs and limit."""
    (tmp_path / "train.sbatch").write_text("#!/bin/bash\necho train\n", encoding="utf-8")
    spec = JobSpec(name="train", script="train.sbatch", gpus=4, time_limit_seconds=600, workdir=str(tmp_path))
    made = BatchJobRequest.from_spec("abc", "gcp", spec)
    assert made == BatchJobRequest("abc", "gcp", "#!/bin/bash\necho train\n", 4, 600)


def test_a_create_whose_reply_was_lost_is_retried_and_makes_one_job(fake: FakeBatchApi, slept: list[float]) -> None:
    """The fake makes the job and drops the reply; the client tries again after a backoff, the name is taken (409),
    and it answers with the job the first try made: one job in the API."""
    fake.inject(Fault(method="create", lose_reply=True))
    job = client_of(fake, slept).create(request(), H100x8)
    assert len(fake.requests_of("create")) == 2
    assert list(fake.jobs) == [job.name]
    assert job.uid == fake.jobs[job.name]["uid"]
    assert slept == [1.0]


def test_a_second_create_of_a_dispatch_finds_the_first_job(fake: FakeBatchApi, slept: list[float]) -> None:
    """A re-run after a crash (create called again for the same dispatch) finds the job, never makes a second."""
    client = client_of(fake, slept)
    first = client.create(request(), H100x8)
    again = client.create(request(), H100x8)
    assert again.uid == first.uid
    assert len(fake.jobs) == 1


def test_a_job_of_that_name_of_another_dispatch_is_refused_and_left_alone(
    fake: FakeBatchApi, slept: list[float]
) -> None:
    """A job named fsm-<id> whose dispatch label is not this dispatch's is never taken for ours: refused, untouched."""
    client = client_of(fake, slept)
    client.create(request(), H100x8)
    name = next(iter(fake.jobs))
    fake.jobs[name]["labels"][LABEL_DISPATCH] = "someone-else"
    with pytest.raises(BatchRefused, match="exists and is not dispatch 0123456789ab's"):
        client.create(request(), H100x8)
    assert fake.requests_of("delete") == []
    assert len(fake.jobs) == 1


def test_a_hundred_jobs_of_a_lane_are_listed_in_one_call(fake: FakeBatchApi, slept: list[float]) -> None:
    """100 paid jobs of the lane (and 3 of another lane) are read with ONE list call filtered on the lane's label."""
    client = client_of(fake, slept)
    for n in range(100):
        client.create(request(f"{n:012x}"), H100x8)
    for n in range(3):
        client.create(request(f"f{n:011x}", lane="other"), H100x8)
    fake.move("fsm-000000000007", "RUNNING")
    before = fake.calls["list"]
    listed = client.jobs("gcp")
    assert fake.calls["list"] - before == 1
    assert len(listed) == 100
    assert {job.labels[LABEL_LANE] for job in listed} == {"gcp"}
    assert {job.job_id: job.state for job in listed}["fsm-000000000007"] == "RUNNING"
    (listing,) = fake.requests_of("list")
    assert listing.query["filter"] == f'labels.{LABEL_LANE}="gcp"'


def test_a_lane_with_more_jobs_than_a_page_reads_every_page(slept: list[float]) -> None:
    """When the API pages the answer, every page is read (one call a page) and no job is missed."""
    with FakeBatchApi(max_page_size=40) as fake:
        client = client_of(fake, slept)
        for n in range(100):
            client.create(request(f"{n:012x}"), H100x8)
        assert len(client.jobs("gcp")) == 100
        assert fake.calls["list"] == 3


def test_an_api_that_refuses_the_label_filter_is_listed_without_it_from_then_on(slept: list[float]) -> None:
    """A 400 for the label filter: the same poll lists once more without it (the labels are checked here, so the
    other lane's job is left out), and every later poll is one unfiltered call."""
    with FakeBatchApi(filters=False) as fake:
        client = client_of(fake, slept)
        client.create(request("a1"), H100x8)
        client.create(request("b1", lane="other"), H100x8)
        assert [job.job_id for job in client.jobs("gcp")] == ["fsm-a1"]
        assert [r.query.get("filter") for r in fake.requests_of("list")] == ['labels.fellows_fsm_lane="gcp"', None]
        assert [job.job_id for job in client.jobs("gcp")] == ["fsm-a1"]
        assert fake.calls["list"] == 3
        assert slept == []


@pytest.mark.parametrize("codes", [(429,), (500,), (429, 500, 503)], ids=["429", "500", "429-500-503"])
def test_429_and_5xx_are_retried_with_a_growing_backoff(
    fake: FakeBatchApi, slept: list[float], codes: tuple[int, ...]
) -> None:
    """Each 429/5xx answer is tried again after a doubling wait (1 s, 2 s, 4 s); the call then succeeds."""
    client = client_of(fake, slept)
    fake.inject(*(Fault(method="create", status=code) for code in codes))
    job = client.create(request(), H100x8)
    assert job.state == "QUEUED"
    assert slept == [1.0, 2.0, 4.0][: len(codes)]
    assert len(fake.requests_of("create")) == len(codes) + 1
    assert len(fake.jobs) == 1


def test_a_403_is_not_retried_and_says_what_to_grant(fake: FakeBatchApi, slept: list[float]) -> None:
    """A permission denied is answered at once (one request, no wait), in one line naming the project and the role."""
    fake.inject(Fault(method="create", status=403, message="Permission 'batch.jobs.create' denied on 'proj-1'"))
    with pytest.raises(BatchRefused) as caught:
        client_of(fake, slept).create(request(), H100x8)
    message = str(caught.value)
    assert "\n" not in message
    assert "project proj-1" in message
    assert "roles/batch.jobsEditor" in message
    assert "batch.jobs.create" in message
    assert (len(fake.requests_of("create")), slept, fake.jobs) == (1, [], {})


def test_retries_that_run_out_raise_unavailable_in_one_line(fake: FakeBatchApi, slept: list[float]) -> None:
    """Five 500s in a row: BatchUnavailable after five tries and four waits, one line with the last answer."""
    fake.inject(*(Fault(method="list", status=500, message="Internal error.\nRetry.") for _ in range(5)))
    with pytest.raises(BatchUnavailable) as caught:
        client_of(fake, slept).jobs("gcp")
    assert slept == [1.0, 2.0, 4.0, 8.0]
    message = str(caught.value)
    assert "\n" not in message
    assert "after 5 tries" in message
    assert "HTTP 500: Internal error. Retry." in message


def test_a_timed_out_call_is_tried_again(fake: FakeBatchApi, slept: list[float]) -> None:
    """A get the API holds past the client's timeout is tried again after a wait, and the second try answers."""
    client = client_of(fake, slept)
    client.create(request(), H100x8)
    fake.inject(Fault(method="get", hang=True))
    timed = client_of(fake, slept, timeout_seconds=0.3)
    job = timed.get("fsm-0123456789ab")
    assert job is not None
    assert job.state == "QUEUED"
    assert slept == [1.0]


def test_a_create_that_times_out_every_try_may_have_been_made(fake: FakeBatchApi, slept: list[float]) -> None:
    """A create whose every try times out raises BatchUnavailable saying it may have been made (a retry by the same
    name finds it), and the next create by that name makes no second job."""
    fake.inject(Fault(method="create", lose_reply=True), Fault(method="create", hang=True))
    client = client_of(fake, slept, timeout_seconds=0.3, backoff=Backoff(attempts=2))
    with pytest.raises(BatchUnavailable, match="may have been made") as caught:
        client.create(request(), H100x8)
    assert caught.value.maybe_made
    assert len(fake.jobs) == 1
    again = client.create(request(), H100x8)
    assert list(fake.jobs) == [again.name]


def test_get_follows_the_state_the_fake_moves_it_to(fake: FakeBatchApi, slept: list[float]) -> None:
    """QUEUED -> SCHEDULED -> RUNNING -> SUCCEEDED as the API says, with its run time and latest event's words."""
    client = client_of(fake, slept)
    client.create(request(), H100x8)
    seen = []
    for state in ("SCHEDULED", "RUNNING", "SUCCEEDED"):
        fake.move("fsm-0123456789ab", state, run_seconds=90.0 if state == "SUCCEEDED" else None)
        job = client.get("fsm-0123456789ab")
        assert job is not None
        seen.append(job.state)
    assert seen == ["SCHEDULED", "RUNNING", "SUCCEEDED"]
    assert job.run_seconds == 90.0
    assert job.note == "Job state is set from RUNNING to SUCCEEDED."
    assert client.get("fsm-nosuchjob") is None


def test_delete_deletes_once_and_a_gone_job_is_answered_false(fake: FakeBatchApi, slept: list[float]) -> None:
    """A delete puts the job in DELETION_IN_PROGRESS (True); once the job is gone a delete answers False."""
    client = client_of(fake, slept)
    job = client.create(request(), H100x8)
    assert client.delete(job.job_id) is True
    assert fake.jobs[job.name]["status"]["state"] == "DELETION_IN_PROGRESS"
    fake.remove(job.job_id)
    assert client.delete(job.job_id) is False
    assert len(fake.requests_of("delete")) == 2


def test_a_delete_whose_reply_was_lost_is_retried_safely(fake: FakeBatchApi, slept: list[float]) -> None:
    """A delete whose reply was lost is tried again: the job is being deleted, nothing else was touched."""
    client = client_of(fake, slept)
    job = client.create(request(), H100x8)
    fake.inject(Fault(method="delete", lose_reply=True))
    assert client.delete(job.job_id) is True
    assert len(fake.requests_of("delete")) == 2
    assert fake.jobs[job.name]["status"]["state"] == "DELETION_IN_PROGRESS"
    assert slept == [1.0]


@pytest.mark.parametrize(
    ("machine", "said"),
    [
        (Machine("zz-huge-8", "nvidia-h100-80gb", 8), "machine type 'zz-huge-8'"),
        (Machine("n1-standard-8", "nvidia-h1000", 1), "accelerator 'nvidia-h1000'"),
    ],
    ids=["machine-type", "accelerator"],
)
def test_an_unknown_machine_type_or_accelerator_is_named_in_plain_words(
    fake: FakeBatchApi, slept: list[float], machine: Machine, said: str
) -> None:
    """The API's 400 for an unknown machine type or accelerator becomes one line naming the value and what to set;
    it is not retried and no job is made."""
    with pytest.raises(BatchRefused) as caught:
        client_of(fake, slept).create(request(), machine)
    message = str(caught.value)
    assert f"GCP Batch does not accept {said} in project proj-1, region us-central1" in message
    assert "the API said: Invalid value for field" in message
    assert "set the lane's accelerator and machine_type" in message
    assert "\n" not in message
    assert (caught.value.code, slept, fake.jobs) == (400, [], {})


def test_missing_credentials_are_their_own_error_before_any_request(
    fake: FakeBatchApi, slept: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With no application default credentials, check_credentials and connect raise CredentialsMissing (exit
    11, saying how to log in) and the API receives nothing."""
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    with pytest.raises(CredentialsMissing, match="gcloud auth application-default login") as caught:
        check_credentials()
    assert caught.value.exit_code == 11
    assert "no-such-key.json" in str(caught.value)
    with pytest.raises(CredentialsMissing):
        BatchClient.connect(WHERE, endpoint=fake.endpoint)
    assert fake.requests == []


def test_credentials_the_api_refuses_are_a_credentials_error(fake: FakeBatchApi, slept: list[float]) -> None:
    """A 401 (expired or revoked credentials, which google-auth cannot refresh) is CredentialsMissing too, with
    the way to log in again, and is not retried."""
    fake.inject(Fault(status=401, message="Request had invalid authentication credentials."))
    with pytest.raises(CredentialsMissing, match="gcloud auth application-default login"):
        client_of(fake, slept).jobs("gcp")
    assert (fake.calls["list"], slept) == (1, [])


def test_anonymous_credentials_are_refused_without_a_fake_endpoint() -> None:
    """Anonymous credentials are for a fake only: asked for without an endpoint (Google itself), connect refuses."""
    with pytest.raises(BatchError, match="only for a fake Batch API"):
        BatchClient.connect(WHERE, anonymous=True)
