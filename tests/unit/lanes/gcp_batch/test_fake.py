"""testing_batch.FakeBatchApi spoken to over plain HTTP (no Google library): the API's paths and error bodies, the
record of requests, the label filter and its paging, the faults a test injects, and the states a test moves."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from fellows_fsm.lanes.gcp_batch.fake import FakeBatchApi, Fault

PARENT = "/v1/projects/p/locations/us-central1"
JOB = {"taskGroups": [{"taskSpec": {"runnables": [{"script": {"text": "true"}}]}}], "labels": {"lane": "gcp"}}


@pytest.fixture
def fake() -> Iterator[FakeBatchApi]:
    """The fake Batch API on a loopback port."""
    with FakeBatchApi() as api:
        yield api


def call(fake: FakeBatchApi, verb: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """One HTTP request to the fake: (status, JSON answer)."""
    host, port = fake.endpoint.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(verb, path, body=json.dumps(body) if body is not None else None)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def test_create_get_list_delete_speak_the_apis_shapes(fake: FakeBatchApi) -> None:
    """A created job is QUEUED with a name, uid and times; get returns it; list finds it; delete answers an
    operation and leaves it DELETION_IN_PROGRESS; every request is recorded with its method."""
    code, job = call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", JOB)
    assert code == 200
    assert job["name"] == "projects/p/locations/us-central1/jobs/fsm-1"
    assert job["status"]["state"] == "QUEUED"
    assert job["uid"]
    assert job["createTime"].endswith("Z")
    assert call(fake, "GET", f"{PARENT}/jobs/fsm-1") == (200, job)
    assert call(fake, "GET", f"{PARENT}/jobs")[1]["jobs"] == [job]
    code, operation = call(fake, "DELETE", f"{PARENT}/jobs/fsm-1")
    assert (code, operation["done"]) == (200, False)
    assert operation["name"].startswith("projects/p/locations/us-central1/operations/")
    assert fake.jobs[job["name"]]["status"]["state"] == "DELETION_IN_PROGRESS"
    assert [r.method for r in fake.requests] == ["create", "get", "list", "delete"]
    assert fake.requests[0].query == {"jobId": "fsm-1"}
    assert fake.requests[0].body == JOB


def test_errors_are_the_apis_error_bodies(fake: FakeBatchApi) -> None:
    """A taken name is 409 ALREADY_EXISTS, a missing job 404 NOT_FOUND, a bad job id 400 INVALID_ARGUMENT."""
    call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", JOB)
    code, answer = call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", JOB)
    assert (code, answer["error"]["status"]) == (409, "ALREADY_EXISTS")
    code, answer = call(fake, "GET", f"{PARENT}/jobs/fsm-2")
    assert (code, answer["error"]["status"]) == (404, "NOT_FOUND")
    code, answer = call(fake, "POST", f"{PARENT}/jobs?jobId=Bad_Name", JOB)
    assert (code, answer["error"]["code"], answer["error"]["status"]) == (400, 400, "INVALID_ARGUMENT")
    assert len(fake.jobs) == 1


def test_an_unknown_machine_type_or_accelerator_is_invalid(fake: FakeBatchApi) -> None:
    """A machine type of no known family, or an accelerator type the fake does not know, is 400, and no job."""
    for policy in ({"machineType": "zz-huge-8"}, {"machineType": "a3-highgpu-8g", "accelerators": [{"type": "x"}]}):
        body = {**JOB, "allocationPolicy": {"instances": [{"policy": policy}]}}
        code, answer = call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", body)
        assert (code, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert fake.jobs == {}


def test_the_label_filter_and_paging_answer_only_the_lanes_jobs(fake: FakeBatchApi) -> None:
    """``labels.lane="gcp"`` lists only that lane's jobs, a page at a time with nextPageToken; a filter the fake
    cannot read is 400, never a silent full list; every list call is counted."""
    fake.max_page_size = 2
    for n in range(3):
        call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-{n}", JOB)
    call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-other", {**JOB, "labels": {"lane": "other"}})
    _, first = call(fake, "GET", f"{PARENT}/jobs?filter=labels.lane%3D%22gcp%22&pageSize=50")
    _, second = call(fake, "GET", f"{PARENT}/jobs?filter=labels.lane%3D%22gcp%22&pageToken={first['nextPageToken']}")
    names = [job["name"].rsplit("/", 1)[-1] for job in first["jobs"] + second["jobs"]]
    assert names == ["fsm-0", "fsm-1", "fsm-2"]
    assert "nextPageToken" not in second
    code, answer = call(fake, "GET", f"{PARENT}/jobs?filter=state%3DRUNNING")
    assert (code, answer["error"]["status"]) == (400, "INVALID_ARGUMENT")
    assert fake.calls["list"] == 3


def test_an_injected_status_answers_once_and_does_nothing(fake: FakeBatchApi) -> None:
    """A 429 fault for create answers the next create with 429 RESOURCE_EXHAUSTED, makes no job, and is used up."""
    fake.inject(Fault(method="create", status=429, message="Quota exceeded"))
    code, answer = call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", JOB)
    assert (code, answer["error"]) == (429, {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"})
    assert fake.jobs == {}
    assert call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", JOB)[0] == 200


def test_a_lost_reply_does_the_work_and_closes_without_answering(fake: FakeBatchApi) -> None:
    """A lose_reply fault makes the job, then closes the connection with no reply."""
    fake.inject(Fault(method="create", lose_reply=True))
    with pytest.raises(http.client.RemoteDisconnected):
        call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", JOB)
    assert list(fake.jobs) == ["projects/p/locations/us-central1/jobs/fsm-1"]


def test_a_hung_request_is_held_until_the_client_gives_up(fake: FakeBatchApi) -> None:
    """A hang fault holds the request past the client's timeout and does nothing."""
    fake.inject(Fault(method="create", hang=True))
    host, port = fake.endpoint.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=0.3)
    connection.request("POST", f"{PARENT}/jobs?jobId=fsm-1", body=json.dumps(JOB))
    with pytest.raises(TimeoutError):
        connection.getresponse()
    connection.close()
    assert fake.jobs == {}


def test_a_held_reply_does_the_work_and_holds_the_answer(fake: FakeBatchApi) -> None:
    """A hold_reply fault makes the job, then holds the reply past the client's timeout (a caller that never hears)."""
    fake.inject(Fault(method="create", hold_reply=True))
    host, port = fake.endpoint.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=0.3)
    connection.request("POST", f"{PARENT}/jobs?jobId=fsm-1", body=json.dumps(JOB))
    with pytest.raises(TimeoutError):
        connection.getresponse()
    connection.close()
    assert list(fake.jobs) == ["projects/p/locations/us-central1/jobs/fsm-1"]


def test_move_walks_a_job_through_its_states_with_events(fake: FakeBatchApi) -> None:
    """A test moves a job QUEUED -> RUNNING -> SUCCEEDED (by job id), each with a status event; an unknown state is
    refused."""
    call(fake, "POST", f"{PARENT}/jobs?jobId=fsm-1", JOB)
    fake.move("fsm-1", "RUNNING")
    fake.move("fsm-1", "SUCCEEDED", run_seconds=12.5)
    status = call(fake, "GET", f"{PARENT}/jobs/fsm-1")[1]["status"]
    assert status["state"] == "SUCCEEDED"
    assert status["runDuration"] == "12.5s"
    assert [e["description"] for e in status["statusEvents"]][1:] == [
        "Job state is set from QUEUED to RUNNING.",
        "Job state is set from RUNNING to SUCCEEDED.",
    ]
    with pytest.raises(ValueError, match="unknown Batch job state 'DONE'"):
        fake.move("fsm-1", "DONE")
    fake.remove("fsm-1")
    assert call(fake, "GET", f"{PARENT}/jobs/fsm-1")[0] == 404


def test_the_fake_answers_with_nagle_off_so_a_kept_connection_is_not_held_40_ms_a_request() -> None:
    """Every connection the fake serves sets TCP_NODELAY: its headers and body go out as two writes, which with
    Nagle on wait for the client's delayed ACK on a kept-alive connection (about 40 ms a request on Linux)."""
    with FakeBatchApi() as api:
        assert api._server is not None
        assert api._server.RequestHandlerClass.disable_nagle_algorithm is True
