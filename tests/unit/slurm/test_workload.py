"""The cluster's history read (slurm/accounting.py: read_workload) from the SLURM outputs the dev cluster prints."""

from __future__ import annotations

import pytest

from fellows_fsm.errors import SchedulerError
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.transport import Reply, Request
from fellows_fsm.slurm.workload import parse_nodes, parse_queue, parse_workload_sacct, read_workload

# As printed on the local SLURM 22.05.8 (sacct -a -P -n -X -o JobID,User,State,ElapsedRaw,TimelimitRaw).
SACCT = """1|root|COMPLETED|30|10
2|root|TIMEOUT|75|1
3|alice|CANCELLED by 0|12|60
4|alice|COMPLETED|100|Partition_Limit
5|bob|RUNNING|40|60
6|bob|FAILED|60|120
"""
SQUEUE = (
    "2|root|R|2026-12-01T10:58:53|30:00|cpu=1,mem=1G,node=1,billing=1,gres/gpu=8|25000|normal-eur|None|\n"
    "8|alice|PD|2026-12-01T12:04:26|30:00|cpu=1,mem=1G,node=1,billing=1,gres/gpu=64|5000|low-eur|Resources|\n"
    "7|root|PD|N/A|10:00||10000|low-eur|Priority|\n"
)
NODES = "NodeName=gpu01 Arch=x86_64 CfgTRES=cpu=64,mem=1000G,billing=64,gres/gpu=64 AllocTRES=cpu=1,mem=1G,gres/gpu=8\n"


def scripted(*, sacct_all: int = 0, squeue: int = 0) -> MockRunner:
    """A runner answering sacct, squeue and scontrol from a script (sacct -a may be refused)."""

    def handler(request: Request) -> Reply:
        argv = request.argv
        if argv[0] == "sacct":
            refused = "-a" in argv and sacct_all != 0
            return Reply(1 if refused else 0, "" if refused else SACCT, "denied" if refused else "", 0.0)
        if argv[0] == "squeue":
            return Reply(squeue, SQUEUE if squeue == 0 else "", "", 0.0)
        return Reply(0, NODES, "", 0.0)

    return MockRunner(handler)


def test_only_jobs_that_ended_on_their_own_with_a_limit_are_the_history() -> None:
    """Completed, timed-out and failed jobs count; cancelled, running and limitless ones do not; others are seen."""
    finished, others = parse_workload_sacct(SACCT, user="root")
    assert [(j.elapsed_seconds, j.limit_seconds) for j in finished] == [(30.0, 600.0), (75.0, 60.0), (60.0, 7200.0)]
    assert [j.ratio for j in finished] == [0.05, 1.0, 60 / 7200]
    assert others


def test_a_history_of_the_users_own_jobs_says_so() -> None:
    """Only the reading user's rows (PrivateData, or nobody else ran): all_users is False."""
    _, others = parse_workload_sacct("1|me|COMPLETED|30|10\n", user="me")
    assert not others


def test_running_and_pending_jobs_and_the_nodes_gpus_are_read() -> None:
    """squeue's running jobs (start, limit, GPUs from tres-alloc), its pending ones (GPUs, priority, QoS, reason,
    whose) and scontrol's configured/allocated GPUs."""
    running, pending = parse_queue(SQUEUE, user="root")
    assert [(j.job_id, j.gpus, j.limit_seconds) for j in running] == [("2", 8, 1800.0)]
    assert [(p.job_id, p.gpus, p.priority, p.qos, p.reason, p.own) for p in pending] == [
        ("8", 64, 5000.0, "low-eur", "Resources", False),
        ("7", 0, 10000.0, "low-eur", "Priority", True),
    ]
    assert parse_nodes(NODES) == (64, 8)
    assert parse_nodes("") == (None, None)


def test_read_history_is_three_commands_and_falls_back_to_own_jobs_when_sacct_a_is_refused() -> None:
    """sacct -a refused: sacct -u the user instead; with squeue and scontrol, four commands in all."""
    runner = scripted(sacct_all=1)
    past = read_workload(runner, user="root", since=0.0, now=100.0)
    assert [a[0] for a in runner.argvs] == ["sacct", "sacct", "squeue", "scontrol"]
    assert "-u" in runner.argvs[1]
    assert (past.total_gpus, past.used_gpus, len(past.finished), past.hidden_gpus) == (64, 8, 3, 0)


def test_read_history_without_squeue_is_an_error_the_caller_keeps_its_last_history_on() -> None:
    """A failed squeue of the running jobs raises SchedulerError (the router's cache keeps its last value)."""
    with pytest.raises(SchedulerError, match="squeue could not list the running jobs"):
        read_workload(scripted(squeue=1), user="root", since=0.0, now=100.0)
