"""The simulator's workloads: JSON-lines traces (and their refusals) and the seeded synthetic workload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fellows_fsm.errors import ConfigError, TraceError
from fellows_fsm.sim.trace import ME, TraceJob, dump_trace, load_trace, parse_trace, synthetic_trace

GOOD = [
    '{"submit_at": 0, "gpus": 8, "duration": 3600, "user": "me"}',
    "",
    '{"submit_at": 5.5, "gpus": 1, "duration": 60, "user": "me", "intent": "debug"}',
    '{"submit_at": 10, "gpus": 4, "duration": 120, "user": "alice", "qos": "low-eur"}',
]


def test_a_valid_trace_parses_in_file_order_skipping_blank_lines() -> None:
    """Each non-blank line becomes one job, indexed from 0, with intent defaulting to prod."""
    jobs = parse_trace(GOOD)
    assert [j.index for j in jobs] == [0, 1, 2]
    assert jobs[0] == TraceJob(0, 0.0, 8, 3600.0, ME)
    assert (jobs[1].intent, jobs[1].mine) == ("debug", True)
    assert (jobs[2].user, jobs[2].qos, jobs[2].mine) == ("alice", "low-eur", False)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"submit_at": 0, "gpu": 8, "duration": 60, "user": "me"}', "key 'gpu' is not known"),
        ('{"submit_at": 0, "duration": 60, "user": "me"}', "key 'gpus' is missing"),
        ('{"submit_at": "soon", "gpus": 8, "duration": 60, "user": "me"}', "key 'submit_at' is 'soon'"),
        ('{"submit_at": 0, "gpus": 8, "duration": 0, "user": "me"}', "key 'duration' is 0"),
        ('{"submit_at": 0, "gpus": 2.5, "duration": 60, "user": "me"}', "key 'gpus' is 2.5"),
        ('{"submit_at": 0, "gpus": 8, "duration": 60, "user": "me", "intent": "urgent"}', "key 'intent' is 'urgent'"),
        ('{"submit_at": 0, "gpus": 8, "duration": 60, "user": "me", "qos": "high-eur"}', "key 'qos' is only for"),
        ('{"submit_at": 0, "gpus": 8, "duration": 60, "user": "bob", "intent": "prod"}', "key 'intent' is only for"),
        ('{"submit_at": 0, "gpus": 8, "duration": 60,', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
    ids=[
        "unknown-key",
        "missing-key",
        "bad-number",
        "zero-duration",
        "fractional-gpus",
        "bad-intent",
        "qos-for-me",
        "intent-for-others",
        "bad-json",
        "not-an-object",
    ],
)
def test_a_malformed_line_is_refused_with_its_line_number_and_key(tmp_path: Path, line: str, words: str) -> None:
    """A bad third line is refused as a ConfigError (exit 3) naming the file, line 3 and the bad key."""
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join([GOOD[0], GOOD[2], line]) + "\n")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    message = str(caught.value)
    assert f"{path} line 3:" in message
    assert words in message
    assert isinstance(caught.value, ConfigError)
    assert caught.value.exit_code == 3


def test_an_empty_trace_is_refused() -> None:
    """A trace with no job at all is refused rather than simulated."""
    with pytest.raises(TraceError, match="no job"):
        parse_trace(["", "  "])


def test_a_missing_trace_file_is_refused_naming_it(tmp_path: Path) -> None:
    """A trace path that does not exist is a TraceError naming the path."""
    with pytest.raises(TraceError, match=r"nope\.jsonl"):
        load_trace(tmp_path / "nope.jsonl")


def test_dump_trace_reads_back_the_same_jobs(tmp_path: Path) -> None:
    """dump_trace writes lines that load_trace reads back to equal jobs."""
    jobs = synthetic_trace(seed=3, hours=6)
    path = tmp_path / "synthetic.jsonl"
    path.write_text(dump_trace(jobs))
    assert load_trace(path) == jobs
    assert all(
        set(json.loads(line)) <= {"submit_at", "gpus", "duration", "user", "intent", "qos"}
        for line in path.read_text().splitlines()
    )


def test_the_synthetic_workload_is_reproducible_and_saturates_my_high_eur_cap() -> None:
    """The same seed gives the same jobs, and my bursts ask for more than high-eur's 16-GPU cap at once."""
    first, again, other = synthetic_trace(seed=7), synthetic_trace(seed=7), synthetic_trace(seed=8)
    assert first == again
    assert first != other
    mine = [j for j in first if j.mine]
    assert mine
    assert {j.gpus for j in mine} == {8}
    bursts: dict[float, int] = {}
    for job in mine:
        start = next((b for b in bursts if job.submit_at - b <= 60), job.submit_at)
        bursts[start] = bursts.get(start, 0) + job.gpus
    assert max(bursts.values()) > 16
