"""The command runner against tiny real executables on PATH (retries, back-off, failure classes, env), and the same
runner code through fellows_fsm.testing.MockRunner (every transport failure, the request it builds)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.errors import SchedulerError, SchedulerUnreachable, SshLoginRefused
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.runner import ONE_ATTEMPT, CommandRunner, RetryPolicy, slurm_env
from fellows_fsm.slurm.transport import CommandMissing, NoAnswer, Reply, Request

# A stand-in SLURM command: logs its argv and environment, then plays its next scripted reply.
FAKE_COMMAND = """#!{python}
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(sys.argv[0])
with open(os.path.join(here, name + ".calls"), "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}) + "\\n")
path = os.path.join(here, name + ".replies")
with open(path) as f:
    replies = json.load(f)
reply = replies.pop(0) if len(replies) > 1 else replies[0]
with open(path, "w") as f:
    json.dump(replies, f)
time.sleep(reply.get("sleep", 0))
sys.stdout.write(reply.get("stdout", ""))
sys.stderr.write(reply.get("stderr", ""))
sys.exit(reply.get("rc", 0))
"""

UNREACHABLE = "squeue: error: Unable to contact slurm controller (connect failure)\n"
SOCKET_TIMEOUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation\n"


class FakeBin:
    """A directory of fake SLURM commands, each replaying a scripted list of replies."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sleeps: list[float] = []

    def add(self, name: str, *replies: dict[str, Any]) -> None:
        """Install ``name`` answering with ``replies`` in turn (the last one repeats)."""
        (self.root / f"{name}.replies").write_text(json.dumps(list(replies) or [{}]))
        command = self.root / name
        command.write_text(FAKE_COMMAND.format(python=sys.executable))
        command.chmod(0o755)

    def calls(self, name: str) -> list[dict[str, Any]]:
        """Every recorded call of ``name``: its argv and environment."""
        path = self.root / f"{name}.calls"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def runner(self, **kwargs: Any) -> CommandRunner:
        """A runner that finds only these commands and records its sleeps instead of sleeping."""
        env = {"PATH": str(self.root), "SLURM_CONF": "/etc/fellows/slurm.conf"}
        return CommandRunner(env=env, sleep=self.sleeps.append, **kwargs)


@pytest.fixture
def fake_bin(tmp_path: Path) -> FakeBin:
    """An empty directory of fake SLURM commands."""
    root = tmp_path / "bin"
    root.mkdir()
    return FakeBin(root)


def test_success_returns_output_and_counts_the_call(fake_bin: FakeBin) -> None:
    """A command that exits 0 returns its stdout and is counted once under its own name."""
    fake_bin.add("squeue", {"stdout": "1|RUNNING\n"})
    runner = fake_bin.runner()
    result = runner.run(["squeue", "-h"])
    assert result.ok
    assert result.stdout == "1|RUNNING\n"
    assert runner.calls == {"squeue": 1}
    assert fake_bin.calls("squeue")[0]["argv"] == ["-h"]
    assert runner.seconds["squeue"] > 0


def test_argv_is_passed_verbatim_never_through_a_shell(fake_bin: FakeBin) -> None:
    """Shell-hostile arguments reach the command byte for byte."""
    fake_bin.add("sbatch", {"stdout": "1\n"})
    hostile = ["--job-name=a b", "$HOME", "x;y", "'q'", '"d"', "`id`"]
    fake_bin.runner().run(["sbatch", *hostile])
    assert fake_bin.calls("sbatch")[0]["argv"] == hostile


def test_plain_failure_is_returned_not_raised(fake_bin: FakeBin) -> None:
    """A refusal (not an outage) comes back as a result whose message is SLURM's last line."""
    fake_bin.add("scontrol", {"rc": 1, "stderr": "Job is no longer pending execution for job 5\n"})
    runner = fake_bin.runner()
    result = runner.run(["scontrol", "update", "jobid=5", "qos=x"])
    assert not result.ok
    assert result.message == "Job is no longer pending execution for job 5"
    assert runner.calls["scontrol"] == 1
    assert fake_bin.sleeps == []


def test_unreachable_is_retried_with_exponential_back_off(fake_bin: FakeBin) -> None:
    """An unreachable controller is asked again after 0.5 s, then 1 s, until it answers."""
    fake_bin.add(
        "squeue",
        {"rc": 1, "stderr": UNREACHABLE},
        {"rc": 1, "stderr": "squeue: error: slurm_receive_msg: Zero Bytes were transmitted or received\n"},
        {"stdout": "7|PENDING\n"},
    )
    runner = fake_bin.runner(retry=RetryPolicy(attempts=5, first_delay_seconds=0.5, max_delay_seconds=8))
    result = runner.run(["squeue"])
    assert result.stdout == "7|PENDING\n"
    assert runner.calls["squeue"] == 3
    assert fake_bin.sleeps == [0.5, 1.0]


def test_unreachable_after_all_attempts_names_the_command(fake_bin: FakeBin) -> None:
    """When every attempt fails to reach the controller, SchedulerUnreachable names the command."""
    fake_bin.add("sacct", {"rc": 1, "stderr": "sacct: error: Connection refused\n"})
    runner = fake_bin.runner(retry=RetryPolicy(attempts=3, first_delay_seconds=1, max_delay_seconds=1.5))
    with pytest.raises(SchedulerUnreachable, match=r"sacct could not reach the SLURM controller.*3 attempt"):
        runner.run(["sacct"])
    assert runner.calls["sacct"] == 3
    assert fake_bin.sleeps == [1.0, 1.5]


def test_time_budget_bounds_the_retries(fake_bin: FakeBin) -> None:
    """No retry starts once the next back-off would overrun the time budget."""
    fake_bin.add("squeue", {"rc": 1, "stderr": UNREACHABLE})
    policy = RetryPolicy(attempts=10, first_delay_seconds=1, max_delay_seconds=100, budget_seconds=2.5)
    runner = fake_bin.runner(retry=policy)
    with pytest.raises(SchedulerUnreachable):
        runner.run(["squeue"])
    assert fake_bin.sleeps == [1.0]


def test_process_timeout_counts_as_unreachable_and_is_retried(fake_bin: FakeBin) -> None:
    """A command that hangs past its timeout is killed and, being idempotent, asked again."""
    # The timeout leaves a loaded machine's Python start-up room (CI once ran the second, quick reply past 0.5 s).
    fake_bin.add("squeue", {"sleep": 60}, {"stdout": "ok\n"})
    runner = fake_bin.runner(timeout_seconds=3.0)
    assert runner.run(["squeue"]).stdout == "ok\n"
    assert runner.calls["squeue"] == 2
    assert len(fake_bin.sleeps) == 1


def test_non_idempotent_command_is_not_repeated_after_a_lost_reply(fake_bin: FakeBin) -> None:
    """A submit whose reply was lost (socket timeout) may have created the job: it is never re-run."""
    fake_bin.add("sbatch", {"rc": 1, "stderr": SOCKET_TIMEOUT}, {"stdout": "9\n"})
    runner = fake_bin.runner()
    with pytest.raises(SchedulerUnreachable, match="may have been carried out"):
        runner.run(["sbatch", "job.sh"], idempotent=False)
    assert runner.calls["sbatch"] == 1


def test_non_idempotent_command_is_repeated_when_never_delivered(fake_bin: FakeBin) -> None:
    """A submit that could not even connect never reached the controller, so it is safe to retry."""
    fake_bin.add("sbatch", {"rc": 1, "stderr": UNREACHABLE}, {"stdout": "9\n"})
    runner = fake_bin.runner()
    assert runner.run(["sbatch", "job.sh"], idempotent=False).stdout == "9\n"
    assert runner.calls["sbatch"] == 2


def test_missing_binary_says_what_to_install(fake_bin: FakeBin) -> None:
    """A SLURM command missing from PATH is a SchedulerError naming it and the way to get it."""
    runner = fake_bin.runner()
    with pytest.raises(SchedulerError, match=r"'squeue' is not installed.*slurm-client.*module load.*host") as info:
        runner.run(["squeue", "-h"])
    assert not isinstance(info.value, SchedulerUnreachable)


def test_environment_passes_slurm_conf_and_drops_output_filters(fake_bin: FakeBin) -> None:
    """SLURM_CONF reaches the command, times are forced to ISO, and SQUEUE_*/SCANCEL_* filters are dropped."""
    fake_bin.add("squeue", {})
    env = {"PATH": str(fake_bin.root), "SLURM_CONF": "/x/slurm.conf", "SQUEUE_USERS": "bob"}
    env |= {"SCANCEL_QOS": "high-eur", "SLURM_TIME_FORMAT": "relative"}
    CommandRunner(env=env).run(["squeue"])
    seen = fake_bin.calls("squeue")[0]["env"]
    assert seen["SLURM_CONF"] == "/x/slurm.conf"
    assert seen["SLURM_TIME_FORMAT"] == "standard"
    assert "SQUEUE_USERS" not in seen
    assert "SCANCEL_QOS" not in seen


def test_environment_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit env, the process environment is read on each call (SLURM_CONF set later counts)."""
    monkeypatch.setenv("SLURM_CONF", "/late/slurm.conf")
    assert slurm_env()["SLURM_CONF"] == "/late/slurm.conf"


def test_undecodable_output_does_not_break_the_call(fake_bin: FakeBin) -> None:
    """A job comment in another encoding is replaced, not raised: one odd job must not stop a poll."""
    raw = fake_bin.root / "latin.txt"
    raw.write_bytes(b"5|PENDING|None|high-eur|N/A|n/a|caf\xe9\n")
    fake_bin.add("squeue", {})
    (fake_bin.root / "squeue").write_text(f"#!/bin/sh\nexec /bin/cat '{raw}'\n")
    result = fake_bin.runner().run(["squeue"])
    assert result.stdout == "5|PENDING|None|high-eur|N/A|n/a|caf\ufffd\n"


def test_back_off_is_capped() -> None:
    """The back-off doubles from the first delay and never exceeds the cap."""
    policy = RetryPolicy(first_delay_seconds=0.5, max_delay_seconds=3)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


# --------------------------------------------------------------------------- the same runner through MockRunner
LOST_REPLY = "squeue: error: slurm_receive_msg: Zero Bytes were transmitted or received\n"


def test_mock_runner_is_the_real_runner_code() -> None:
    """MockRunner is a CommandRunner that adds records only: the attempts, their failure classes and the counts are
    CommandRunner's own."""
    assert issubclass(MockRunner, CommandRunner)
    assert "_attempt" not in vars(MockRunner)
    runner = MockRunner.scripted({"squeue": [(1, "", UNREACHABLE), (0, "7|PENDING\n", "")]})
    assert runner.run(["squeue"]).stdout == "7|PENDING\n"
    assert (runner.calls, runner.argvs, len(runner.requests)) == ({"squeue": 2}, [("squeue",)], 2)


def test_mock_runner_rides_through_unreachable_with_back_off() -> None:
    """Both outage classes (never connected, reply lost) are retried for an idempotent command, doubling the sleep."""
    runner = MockRunner.scripted(
        {
            "squeue": [
                (1, "", UNREACHABLE),
                (1, "", LOST_REPLY),
                NoAnswer("no reply within 30 s", delivered=True),
                (0, "ok\n", ""),
            ]
        },
        retry=RetryPolicy(attempts=5, first_delay_seconds=0.5, max_delay_seconds=8),
    )
    assert runner.run(["squeue"]).stdout == "ok\n"
    assert runner.calls["squeue"] == 4
    assert runner.slept == [0.5, 1.0, 2.0]


def test_mock_runner_spent_retries_raise_naming_the_transport() -> None:
    """When every attempt is unreachable, SchedulerUnreachable names the command, the peer and the reach hint."""
    runner = MockRunner.scripted(
        {"sacct": [(1, "", "sacct: error: Connection refused\n")]},
        retry=RetryPolicy(attempts=3, first_delay_seconds=1, max_delay_seconds=1.5),
    )
    with pytest.raises(SchedulerUnreachable, match=r"sacct could not reach the MockTransport .*3 attempt.*handler"):
        runner.run(["sacct"])
    assert runner.calls["sacct"] == 3
    assert runner.slept == [1.0, 1.5]


def test_mock_runner_retries_stop_at_the_time_budget() -> None:
    """No retry starts once the next back-off would overrun the budget, however many attempts remain."""
    policy = RetryPolicy(attempts=10, first_delay_seconds=1, max_delay_seconds=100, budget_seconds=2.5)
    runner = MockRunner.scripted({"squeue": [(1, "", UNREACHABLE)]}, retry=policy)
    with pytest.raises(SchedulerUnreachable, match="after 2 attempt"):
        runner.run(["squeue"])
    assert runner.slept == [1.0]


def test_mock_runner_per_call_policy_overrides_the_runners() -> None:
    """retry=ONE_ATTEMPT (the poll's own calls) makes one attempt whatever the runner's policy."""
    runner = MockRunner.scripted({"squeue": [(1, "", UNREACHABLE), (0, "ok\n", "")]}, retry=RetryPolicy(attempts=5))
    with pytest.raises(SchedulerUnreachable, match="after 1 attempt"):
        runner.run(["squeue"], retry=ONE_ATTEMPT)
    assert runner.calls["squeue"] == 1
    assert runner.slept == []


@pytest.mark.parametrize(
    "lost",
    [(1, "", SOCKET_TIMEOUT), (1, "", LOST_REPLY), NoAnswer("no reply within 30 s", delivered=True)],
    ids=["socket-timeout", "zero-bytes", "transport-timeout"],
)
def test_mock_runner_never_repeats_a_non_idempotent_command_that_may_have_run(
    lost: tuple[int, str, str] | Exception,
) -> None:
    """A lost reply to a submit may mean the job exists: one attempt, then SchedulerUnreachable saying so."""
    runner = MockRunner.scripted({"sbatch": [lost, (0, "9\n", "")]})
    with pytest.raises(SchedulerUnreachable, match="may have been carried out"):
        runner.run(["sbatch", "job.sh"], idempotent=False)
    assert runner.calls["sbatch"] == 1
    assert runner.idempotent == [False]


@pytest.mark.parametrize(
    "never",
    [(1, "", UNREACHABLE), (1, "", "sbatch: error: Connection refused\n"), NoAnswer("refused", delivered=False)],
    ids=["unable-to-contact", "connection-refused", "transport-not-connected"],
)
def test_mock_runner_repeats_a_non_idempotent_command_that_never_left(never: tuple[int, str, str] | Exception) -> None:
    """A submit that never reached the controller is safe to repeat: it is retried and its answer returned."""
    runner = MockRunner.scripted({"sbatch": [never, (0, "9\n", "")]})
    assert runner.run(["sbatch", "job.sh"], idempotent=False).stdout == "9\n"
    assert runner.calls["sbatch"] == 2
    assert runner.slept == [0.5]


def test_mock_runner_returns_a_refusal_without_retrying() -> None:
    """A command's own refusal (no outage words) is a result, not an error: one attempt, no sleep."""
    runner = MockRunner.scripted({"scontrol": [(1, "", "Job is no longer pending execution for job 5\n")]})
    result = runner.run(["scontrol", "update", "jobid=5", "qos=x"])
    assert (result.ok, result.message) == (False, "Job is no longer pending execution for job 5")
    assert runner.calls["scontrol"] == 1
    assert runner.slept == []


def test_mock_runner_missing_command_is_a_scheduler_error_at_once() -> None:
    """A program the transport cannot find is a SchedulerError (not unreachable) naming it, never retried."""
    runner = MockRunner.scripted({"squeue": [CommandMissing("'squeue' is not installed or not on PATH here")]})
    with pytest.raises(SchedulerError, match=r"'squeue' cannot run: .*not installed.*slurm-client") as info:
        runner.run(["squeue"])
    assert not isinstance(info.value, SchedulerUnreachable)
    assert runner.calls["squeue"] == 1


def test_mock_runner_lets_a_refused_login_through_at_once() -> None:
    """ssh refusing the login (a host key, a key) is not an outage to wait out: it passes through, no retry."""
    runner = MockRunner.scripted({"squeue": [SshLoginRefused("charmander", "ssh could not log in to charmander")]})
    with pytest.raises(SshLoginRefused, match="could not log in"):
        runner.run(["squeue"])
    assert runner.calls["squeue"] == 1
    assert runner.slept == []


def test_mock_runner_sends_the_env_rules_stdin_and_timeout_with_each_request() -> None:
    """Each request carries ISO times, the output-filter prefixes to drop, the stdin and the call's timeout."""
    runner = MockRunner(lambda request: Reply(0, "", "", 0.0), timeout_seconds=12)
    runner.run(["sbatch", "--parsable"], stdin=b"#!/bin/bash\n", idempotent=False)
    runner.run(["squeue"], timeout_seconds=3)
    first, second = runner.requests
    assert first == Request(
        ("sbatch", "--parsable"),
        {"SLURM_TIME_FORMAT": "standard"},
        ("SBATCH_", "SLURM_", "SALLOC_", "SRUN_", "SQUEUE_", "SACCT_", "SCANCEL_", "SCONTROL_", "SACCTMGR_", "SINFO_"),
        b"#!/bin/bash\n",
        12,
        keep_env=("SLURM_CONF",),
    )
    assert (second.stdin, second.timeout_seconds) == (None, 3)


def test_mock_runner_scripted_refuses_an_unscripted_command() -> None:
    """A command the script does not answer fails the test by name instead of passing silently."""
    runner = MockRunner.scripted({"squeue": [(0, "", "")]})
    with pytest.raises(AssertionError, match=r"no reply for 'scancel'"):
        runner.run(["scancel", "5"])


SLURMDBD_DOWN = (
    "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection to host:head1:6819: "
    "Connection refused\n"
    "sacct: error: Sending PersistInit msg: Connection refused\n"
    "sacct: error: Problem talking to the database: Connection refused\n"
)
"""What sacct prints when slurmdbd (not the controller) refuses, as seen on real clusters (public issue threads)."""


def test_the_accounting_database_down_is_a_failed_command_not_an_unreachable_controller() -> None:
    """slurmdbd down: sacct fails once, returned as a failure (never retried, never SchedulerUnreachable), although
    its words say "Connection refused"; the controller's own refusal is still unreachable."""
    runner = MockRunner.scripted({"sacct": [(1, "", SLURMDBD_DOWN)]})
    result = runner.run(("sacct", "-j", "7"))
    assert (result.ok, result.returncode, runner.calls["sacct"], runner.slept) == (False, 1, 1, [])
    refused = MockRunner.scripted({"squeue": [(1, "", "squeue: error: Connection refused\n")]})
    with pytest.raises(SchedulerUnreachable):
        refused.run(("squeue",), retry=ONE_ATTEMPT)


def test_spent_retries_say_whether_any_attempt_may_have_reached_the_cluster() -> None:
    """An sbatch whose every attempt had its connection refused raises SchedulerUnreachable with delivered False
    (nothing was queued: a cluster after fellows may be passed over); a controller that may have had the request
    (a timeout) raises it with delivered True (the dispatch waits for the token lookup instead)."""
    refused = MockRunner.scripted(
        {"sbatch": [(1, "", "sbatch: error: Connection refused\n")]},
        retry=RetryPolicy(attempts=2, first_delay_seconds=0.1),
    )
    with pytest.raises(SchedulerUnreachable) as never:
        refused.run(["sbatch"], idempotent=False)
    assert never.value.delivered is False
    assert refused.calls["sbatch"] == 2
    timed_out = "sbatch: error: Socket timed out on send/recv operation\n"
    lost = MockRunner.scripted({"sbatch": [(1, "", timed_out)]}, retry=RetryPolicy(attempts=2))
    with pytest.raises(SchedulerUnreachable) as maybe:
        lost.run(["sbatch"], idempotent=False)
    assert maybe.value.delivered is True
    assert lost.calls["sbatch"] == 1  # (and never repeated)
    contact = MockRunner.scripted({"sbatch": [(1, "", UNREACHABLE)]}, retry=RetryPolicy(attempts=2))
    with pytest.raises(SchedulerUnreachable) as down:
        contact.run(["sbatch"], idempotent=False)
    assert down.value.delivered is False  # slurmctld could not be contacted: the request never left
