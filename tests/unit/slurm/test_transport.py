"""The transports under the SLURM runner: remote quoting through real shells, ssh's own failures told apart, the
script sent on stdin, all without a cluster (MockTransport, a stand-in ssh program)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fellows_fsm.errors import ConfigError, SchedulerUnreachable, SshLoginRefused
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.mock import MockTransport
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner, RetryPolicy
from fellows_fsm.slurm.transport import (
    CommandMissing,
    NoAnswer,
    Reply,
    Request,
    SshTransport,
    check_destination,
    remote_command,
)

DUMP = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('SQUEUE_FORMAT'), os.environ.get('K')]))"
HOSTILE = [
    "x; touch /tmp/pwned $(id)",
    "it's",
    'a "quoted" word',
    "two\nlines",
    "!bang !!",
    "back\\slash",
    "$HOME ${HOME} `id`",
    "résumé",
    "",
    "  spaces  ",
    "tab\tstop",
    "trailing newline\n",
    "~ * ? [a] {b,c} | & > < # %1 ^x",
]
SHELLS = [s for s in ("sh", "dash", "bash", "zsh", "tcsh", "csh", "fish") if shutil.which(s)]


def _through(shell: str, words: list[str]) -> list[object]:
    """What argv, SQUEUE_FORMAT and K a program sees when ``shell -c`` runs the remote command (as sshd does)."""
    command = remote_command([sys.executable, "-c", DUMP, *words], {"K": "v a l"}, ("SQUEUE_",))
    env = {"PATH": "/usr/bin:/bin", "SQUEUE_FORMAT": "%i", "HOME": "/root"}
    proc = subprocess.run([shell, "-c", command], capture_output=True, text=True, env=env, timeout=30, check=True)
    result: list[object] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("shell", SHELLS, ids=SHELLS)
def test_hostile_words_arrive_literal_under_every_login_shell(shell: str) -> None:
    """Spaces, quotes, $, ;, !, backslashes, newlines and non-ASCII reach the program unchanged, whatever the shell."""
    assert _through(shell, HOSTILE) == [HOSTILE, None, "v a l"]


@pytest.mark.parametrize("shell", SHELLS, ids=SHELLS)
def test_plain_words_arrive_literal_and_the_filter_variables_are_dropped(shell: str) -> None:
    """Words with no hostile character travel single-quoted; SQUEUE_* is dropped and K set on the remote side."""
    words = ["squeue", "-h", "-O", "JobID:|,Comment:|", "x; y $(id)"]
    assert _through(shell, words) == [words, None, "v a l"]


def test_no_pwned_file_from_a_job_name_in_the_command() -> None:
    """A job name that is shell code runs nothing: no file appears."""
    target = Path("/tmp/fellows-quoting-pwned")
    target.unlink(missing_ok=True)
    for shell in SHELLS:
        _through(shell, [f"x; touch {target} $(touch {target})"])
    assert not target.exists()


def test_a_command_exit_255_is_not_read_as_ssh_failing() -> None:
    """The remote wrapper maps the command's own 255 to 254: only ssh itself exits 255."""
    command = remote_command([sys.executable, "-c", "raise SystemExit(255)"], {}, ())
    assert subprocess.run(["sh", "-c", command], check=False, timeout=30).returncode == 254


@pytest.mark.parametrize(
    "host", ["charmander", "me@login.example.org", "ssh://me@login:2222", "login-1"], ids=lambda h: h
)
def test_ssh_destinations_are_accepted(host: str) -> None:
    """A Host alias, user@host and ssh://user@host:port are destinations."""
    assert check_destination(host) == host


@pytest.mark.parametrize("host", ["-oProxyCommand=x", "a b", "", "host:22", "a;b c"], ids=repr)
def test_a_destination_that_is_no_destination_is_refused(host: str) -> None:
    """An option-like, spaced or empty destination is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="is not an ssh destination"):
        check_destination(host)


def _fake_ssh(tmp_path: Path, rc: int, stderr: str, stdout: str = "") -> SshTransport:
    """An SshTransport whose ssh is a stand-in program that prints ``stderr`` and exits ``rc``."""
    program = tmp_path / "ssh"
    program.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdin.read()\nsys.stdout.write({stdout!r})\n"
        f"sys.stderr.write({stderr!r})\nsys.exit({rc})\n"
    )
    program.chmod(0o755)
    return SshTransport("charmander", control_dir=tmp_path / "ssh-dir", ssh=str(program))


@pytest.mark.parametrize(
    "stderr",
    [
        "No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\r\n"
        "Host key verification failed.\r\n",
        "me@charmander: Permission denied (publickey).\r\n",
        "ssh: Could not resolve hostname charmander: Name or service not known\r\n",
        "Can't open user config file /nonexistent: No such file or directory\r\n",
    ],
    ids=["host-key", "auth", "unknown-host", "ssh-config"],
)
def test_a_login_ssh_refuses_is_one_error_naming_the_host(tmp_path: Path, stderr: str) -> None:
    """A host key, an auth refusal or an unknown name raise SshLoginRefused (exit 9) naming the host, not a retry."""
    runner = CommandRunner(transport=_fake_ssh(tmp_path, 255, stderr), sleep=lambda _: None)
    with pytest.raises(SshLoginRefused, match="ssh could not log in to charmander") as caught:
        runner.run(("squeue",))
    assert caught.value.exit_code == 9
    assert "\n" not in str(caught.value)
    assert runner.calls["squeue"] == 1


def test_a_refused_connection_is_unreachable_and_safe_to_repeat(tmp_path: Path) -> None:
    """ssh: Connection refused (exit 255) never reached the shell: NoAnswer(delivered=False)."""
    transport = _fake_ssh(tmp_path, 255, "ssh: connect to host 127.0.0.1 port 2222: Connection refused\r\n")
    with pytest.raises(NoAnswer) as caught:
        transport.run(Request(("squeue",)))
    assert caught.value.delivered is False


def test_a_dropped_connection_may_have_delivered_so_a_submit_is_not_repeated(tmp_path: Path) -> None:
    """A master that died mid-command may have run it: a non-idempotent command raises at once, unrepeated."""
    transport = _fake_ssh(tmp_path, 255, "mux_client_read_packet: read header failed: Broken pipe\r\n")
    runner = CommandRunner(transport=transport, sleep=lambda _: None)
    with pytest.raises(SchedulerUnreachable, match="not repeated blindly"):
        runner.run(("sbatch", "--parsable"), idempotent=False, stdin=b"#!/bin/sh\n")
    assert runner.calls["sbatch"] == 1


def test_the_command_own_exit_status_comes_back(tmp_path: Path) -> None:
    """A remote command's own failure (exit 1) is its reply, with its words."""
    transport = _fake_ssh(tmp_path, 1, "sbatch: error: Invalid qos specification\n")
    reply = transport.run(Request(("sbatch",)))
    assert (reply.returncode, reply.stderr) == (1, "sbatch: error: Invalid qos specification\n")


def test_a_missing_remote_program_names_the_host(tmp_path: Path) -> None:
    """env's 127 on the host is CommandMissing naming the host."""
    transport = _fake_ssh(tmp_path, 127, "env: 'squeue': No such file or directory\n")
    with pytest.raises(CommandMissing, match="on charmander"):
        transport.run(Request(("squeue",)))


def test_ssh_argv_enforces_batch_mode_and_one_control_socket(tmp_path: Path) -> None:
    """BatchMode, ConnectTimeout and the control socket come before the user's options, the destination last."""
    transport = SshTransport("charmander", options=("-F", "/cfg"), control_dir=tmp_path / "ssh", ssh="ssh")
    argv = transport.ssh_argv("--", "charmander", "cmd")
    assert argv.index("BatchMode=yes") < argv.index("-F")
    assert f"ControlPath={transport.control_path}" in argv
    assert "ControlMaster=auto" in argv
    assert argv[-3:] == ["--", "charmander", "cmd"]
    assert transport.control_path.parent == tmp_path / "ssh"


def test_a_deep_state_dir_puts_the_socket_in_a_short_private_dir(tmp_path: Path) -> None:
    """A socket path over the kernel's limit moves to a short per-user temp dir, mode 0700."""
    deep = tmp_path / ("d" * 90)
    transport = SshTransport("charmander", control_dir=deep / "ssh", ssh="ssh")
    assert len(str(transport.control_path)) <= 88
    assert transport.control_path.parent.stat().st_mode & 0o777 == 0o700


def test_retries_a_connection_that_never_reached_the_host() -> None:
    """A NoAnswer(delivered=False) from the transport is retried within the policy, then unreachable."""

    def handler(request: Request) -> Reply:
        raise NoAnswer("ssh to charmander: Connection refused", delivered=False)

    transport = MockTransport(handler, remote=True)
    runner = CommandRunner(transport=transport, retry=RetryPolicy(attempts=3), sleep=lambda _: None)
    with pytest.raises(SchedulerUnreachable, match=r"could not reach the MockTransport .*after 3 attempt"):
        runner.run(("sacctmgr", "show", "qos"))
    assert len(transport.requests) == 3


def _remote_port(tmp_path: Path, *, workdir: str | None) -> tuple[SlurmScheduler, MockTransport]:
    def handler(request: Request) -> Reply:
        return Reply(0, "42\n", "", 0.01)

    transport = MockTransport(handler, remote=True)
    return SlurmScheduler(CommandRunner(transport=transport), user="me", remote_workdir=workdir), transport


def test_over_ssh_the_script_travels_on_stdin_and_runs_in_remote_workdir(tmp_path: Path) -> None:
    """The sbatch over ssh carries the script's bytes on stdin, no local path, and --chdir=remote_workdir."""
    script = tmp_path / "only here.sbatch"
    script.write_bytes(b"#!/bin/bash\nsleep 1\n")
    port, transport = _remote_port(tmp_path, workdir="/scratch/me")
    assert port.submit(JobSpec("train", str(script), gpus=8), qos="high-eur", token="fsm-a-r0") == "42"
    (request,) = transport.requests
    assert request.stdin == b"#!/bin/bash\nsleep 1\n"
    assert str(script) not in request.argv
    assert "--chdir=/scratch/me" in request.argv


def test_over_ssh_the_script_chdir_wins_over_remote_workdir(tmp_path: Path) -> None:
    """A script with #SBATCH --chdir gets no --chdir of ours: sbatch reads its own line on the cluster."""
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --chdir=/work/me\nsleep 1\n")
    port, transport = _remote_port(tmp_path, workdir="/scratch/me")
    port.submit(JobSpec("train", str(script)), qos="high-eur", token="fsm-a-r0")
    assert not [a for a in transport.requests[0].argv if a.startswith("--chdir")]


def test_locally_the_script_path_goes_to_sbatch_as_today(tmp_path: Path) -> None:
    """Without a remote transport sbatch gets the script's path and no stdin."""

    def handler(request: Request) -> Reply:
        return Reply(0, "7\n", "", 0.01)

    transport = MockTransport(handler)
    port = SlurmScheduler(CommandRunner(transport=transport), user="me")
    port.submit(JobSpec("train", "/jobs/train.sh"), qos="high-eur", token="fsm-a-r0")
    assert transport.requests[0].argv[-1] == "/jobs/train.sh"
    assert transport.requests[0].stdin is None


def test_over_ssh_the_user_is_the_login_user_asked_once() -> None:
    """The port's user over ssh is `id -un` on the host, asked once."""

    def handler(request: Request) -> Reply:
        return Reply(0, "alice\n", "", 0.01)

    transport = MockTransport(handler, remote=True)
    port = SlurmScheduler(CommandRunner(transport=transport))
    assert (port.user, port.user) == ("alice", "alice")
    assert [r.argv for r in transport.requests] == [("id", "-un")]
