"""fellows-fsm reaching the real local SLURM through a real sshd on loopback (scripts/dev-sshd), as from a
workstation: the router's process has no SLURM client on PATH (stubs that fail loudly) and no SLURM_CONF."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import attrs
import pytest

from fellows_fsm.journal.store import Journal
from fellows_fsm.slurm.transport import SshTransport

from .cli_harness import json_of, one_error
from .conftest import REPO, RUNTIME, Cluster, QueueRow
from .settled import LEDGER_CODE, assert_settled, ledger

pytestmark = pytest.mark.slurm

FELLOWS_FSM = Path(sys.executable).parent / "fellows-fsm"
DEV_SSHD = REPO / "scripts" / "dev-sshd"
HOST = "fellows-cluster"
SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "sacctmgr", "sinfo", "srun")


@attrs.frozen
class Sshd:
    """The loopback sshd in front of the cluster: its client ssh_config and the dev-sshd script."""

    ssh_config: Path

    def down(self) -> None:
        """Kill the listener and every session below it."""
        subprocess.run([str(DEV_SSHD), "down"], capture_output=True, timeout=60, check=True)

    def up(self) -> None:
        """Start the listener again (the same keys)."""
        up = subprocess.run([str(DEV_SSHD), "up"], capture_output=True, text=True, timeout=300, check=False)
        assert up.returncode == 0, up.stderr


@pytest.fixture(scope="session")
def sshd(cluster: Cluster) -> Iterator[Sshd]:
    """scripts/dev-sshd up for the session (installing openssh-server if missing), down at the end."""
    up = subprocess.run([str(DEV_SSHD), "up"], capture_output=True, text=True, timeout=600, check=False)
    if up.returncode != 0:
        pytest.fail(f"scripts/dev-sshd up exited {up.returncode}: {up.stderr.strip()[-2000:]}", pytrace=False)
    try:
        yield Sshd(RUNTIME / "sshd" / "ssh_config")
    finally:
        subprocess.run([str(DEV_SSHD), "down"], capture_output=True, timeout=60, check=False)


@pytest.fixture
def remote(sshd: Sshd, slurm: Cluster, tmp_path: Path) -> Iterator[Remote]:
    """A workstation-like setting: stub SLURM commands on PATH that record any call, no SLURM_CONF, a config
    whose [fellows] host is the loopback sshd; its ssh master is ended afterwards."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    calls = tmp_path / "local-slurm-calls"
    for name in SLURM_COMMANDS:
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >>{calls}\necho "STUB: local {name} must not run" >&2\nexit 97\n')
        stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = f"{stubs}:{FELLOWS_FSM.parent}:/usr/bin:/bin"
    handle = Remote(tmp_path, sshd, env, calls)
    try:
        yield handle
    finally:
        handle.transport().close()


class Remote:
    """fellows-fsm runs with a remote config; ``local_calls`` lists any SLURM command that ran here."""

    def __init__(self, tmp_path: Path, sshd: Sshd, env: dict[str, str], calls: Path) -> None:
        self.tmp_path = tmp_path
        self.sshd = sshd
        self.env = env
        self.calls = calls
        self.workdir = RUNTIME / "jobs"
        self.config = self.write_config()

    def write_config(self, *, ssh_config: Path | None = None, fellows: str = "", cap: float = 3.0) -> Path:
        """A config reaching the cluster over ssh: short caps, a quick poll, a ledger gcp lane."""
        command = json.dumps([sys.executable, "-c", LEDGER_CODE, str(self.tmp_path / "gcp.ledger"), "{dispatch_id}"])
        path = self.tmp_path / f"fellows-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(
            f'state_dir = "{self.tmp_path / "state"}"\n\n[fellows]\nhost = "{HOST}"\n'
            f'ssh_options = ["-F", "{ssh_config or self.sshd.ssh_config}"]\nremote_workdir = "{self.workdir}"\n'
            f'park_cap_seconds = {cap}\npoll_interval_seconds = 0.5\npark_early = "off"\n{fellows}\n\n'
            f"[lanes.gcp]\ncommand = {command}\n",
            encoding="utf-8",
        )
        return path

    def argv(self, config: Path, *args: str) -> list[str]:
        return [str(FELLOWS_FSM), "--config", str(config), *args]

    def cli(self, *args: str, config: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run fellows-fsm in the workstation-like environment."""
        return subprocess.run(
            self.argv(config or self.config, *args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
            cwd=self.tmp_path,
            check=False,
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start fellows-fsm in the background (the tests act on the cluster while it follows)."""
        return subprocess.Popen(
            self.argv(self.config, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.tmp_path,
        )

    def script(self, body: str = "sleep 300") -> Path:
        """A job script that exists only here, in the test's own directory."""
        path = self.tmp_path / "router-only" / "train it.sbatch"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"#!/bin/bash\n#SBATCH --output=/dev/null\n{body}\n", encoding="utf-8")
        return path

    def local_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def journal(self) -> Journal:
        return Journal(self.tmp_path / "state" / "journal.sqlite3", readonly=True)

    def transport(self) -> SshTransport:
        """A transport on the same destination and options, so the same control socket as fellows-fsm's."""
        return SshTransport(
            HOST, options=("-F", str(self.sshd.ssh_config)), control_dir=self.tmp_path / "state" / "ssh"
        )


def _jobs(slurm: Cluster, dispatch_id: str) -> list[QueueRow]:
    prefix = f"fsm-{dispatch_id}-r"
    return sorted((r for r in slurm.queue() if r.comment.startswith(prefix)), key=lambda r: int(r.job_id))


def _show_job(job_id: str) -> dict[str, str]:
    """scontrol show job's Key=Value pairs for one job (read here, by the test, not by the router)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def _pending_dispatch(slurm: Cluster, qos: str) -> QueueRow:
    """Wait for one of our dispatches' jobs to pend on ``qos``."""
    found: list[QueueRow] = []

    def pending() -> bool:
        found[:] = [r for r in slurm.queue() if r.comment.startswith("fsm-") and r.state == "PENDING" and r.qos == qos]
        return bool(found)

    slurm.wait_for(pending, f"a dispatch's job pending on {qos}", timeout=60)
    return found[0]


def _dispatch_of(row: QueueRow) -> str:
    return row.comment.removeprefix("fsm-").rsplit("-r", 1)[0]


def test_walks_a_full_high_eur_to_normal_eur_over_ssh(remote: Remote, slurm: Cluster) -> None:
    """Own high-eur cap full: over ssh the dispatch parks, RUNS on normal-eur; no SLURM command ran here."""
    slurm.occupy("high-eur", 8, count=2)
    ladder = json_of(remote.cli("ladder", "--json", "--gpus", "8"))
    assert "high-eur" in json.dumps(ladder)
    out = json_of(remote.cli("submit", "--json", "--gpus", "8", "--time", "10:00", str(remote.script())))
    assert (out["state"], out["lane"], out["qos"]) == ("RUNNING", "fellows", "normal-eur")
    jobs = _jobs(slurm, out["dispatch_id"])
    assert [(j.qos, j.state, j.ever_ran) for j in jobs] == [
        ("high-eur", "CANCELLED", False),
        ("normal-eur", "RUNNING", True),
    ]
    assert remote.local_calls() == []
    check = remote.cli("config", "check")
    assert check.returncode == 0
    assert f"{HOST} over ssh" in check.stdout


def test_an_ungranted_qos_is_refused_over_ssh_before_anything_is_queued(remote: Remote, slurm: Cluster) -> None:
    """A ladder naming a QoS the user is not granted exits 3 naming it; no job is queued; nothing ran here."""
    name = "gold-eur"
    subprocess.run(["sacctmgr", "-i", "add", "qos", name], capture_output=True, timeout=30, check=True)
    try:
        config = remote.write_config(fellows=f"qos_ladder = ['normal-eur', '{name}']")
        before = {r.job_id for r in slurm.queue()}
        line = one_error(remote.cli("submit", "--gpus", "8", str(remote.script()), config=config), 3)
        assert f"'{name}'" in line
        assert "not granted" in line
        assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)
        assert remote.local_calls() == []
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "qos", name], capture_output=True, timeout=30, check=False)


def test_init_over_ssh_writes_a_config_from_the_remote_grants(remote: Remote, slurm: Cluster) -> None:
    """init --host reads the grants on the login node over ssh (nothing runs here) and writes a config with that
    host, its ssh options and the remote ladder, which then loads and checks."""
    written = remote.tmp_path / "init.toml"
    cfg = str(remote.sshd.ssh_config)
    argv = [str(FELLOWS_FSM), "init", "--host", HOST, "--ssh-option=-F", f"--ssh-option={cfg}", "-o", str(written)]
    # The state dir of the fixture's config: init's ssh master is the one the fixture ends.
    env = {**remote.env, "FELLOWS_FSM_STATE_DIR": str(remote.tmp_path / "state")}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert f"wrote {written}: ladder high-eur -> normal-eur -> low-eur; debug QoS dev-eur" in done.stdout
    text = written.read_text(encoding="utf-8")
    assert f'host = "{HOST}"' in text
    assert f'ssh_options = ["-F", "{cfg}"]' in text
    assert remote.local_calls() == []
    check = remote.cli("config", "check", config=written)
    assert check.returncode == 0, check.stderr
    assert "config OK" in check.stdout


def test_sshd_gone_for_15_s_mid_rung_stops_the_clock_and_runs_on_normal_eur(
    remote: Remote, slurm: Cluster, tmp_path: Path
) -> None:
    """sshd and its sessions killed for 15 s while the job pends on high-eur: no handoff, RUNS on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    remote.config = remote.write_config(cap=6.0)
    follower = remote.popen("submit", "--json", "--gpus", "8", "--time", "10:00", str(remote.script()))
    try:
        row = _pending_dispatch(slurm, "high-eur")
        remote.sshd.down()
        time.sleep(15)  # longer than the whole ladder (6 + 6 + 6 s): only a stopped clock keeps it off GCP
        remote.sshd.up()
        out, err = follower.communicate(timeout=180)
    finally:
        if follower.poll() is None:
            follower.kill()
    result = json.loads(out)
    assert (result["state"], result["qos"]) == ("RUNNING", "normal-eur"), err
    dispatch_id = _dispatch_of(row)
    with closing(remote.journal()) as journal:
        assert "pause" in [s.trigger for s in journal.steps(dispatch_id)]
        assert ledger(tmp_path) == []
        assert remote.local_calls() == []
        assert_settled(slurm, journal, tmp_path, [dispatch_id])


def test_a_killed_master_is_replaced_by_the_next_poll(remote: Remote, slurm: Cluster, tmp_path: Path) -> None:
    """The ssh master SIGKILLed alone mid-rung: the next command opens a new one and the walk goes on."""
    slurm.occupy("high-eur", 8, count=2)
    remote.config = remote.write_config(cap=6.0)
    follower = remote.popen("submit", "--json", "--gpus", "8", "--time", "10:00", str(remote.script()))
    transport = remote.transport()
    try:
        row = _pending_dispatch(slurm, "high-eur")
        first = transport.master_pid()
        assert first is not None
        os.kill(first, signal.SIGKILL)
        out, err = follower.communicate(timeout=180)
    finally:
        if follower.poll() is None:
            follower.kill()
    result = json.loads(out)
    assert (result["state"], result["qos"]) == ("RUNNING", "normal-eur"), err
    second = transport.master_pid()
    assert second is not None
    assert second != first
    assert ledger(tmp_path) == []
    with closing(remote.journal()) as journal:
        assert_settled(slurm, journal, tmp_path, [_dispatch_of(row)])


def test_an_unknown_host_key_is_one_line_and_nothing_is_queued(remote: Remote, slurm: Cluster) -> None:
    """With no known_hosts entry for the sshd, submit exits 9 with one line naming the host; nothing is queued."""
    text = remote.sshd.ssh_config.read_text()
    empty = remote.tmp_path / "empty_known_hosts"
    empty.write_text("")
    strict = remote.tmp_path / "ssh_config"
    strict.write_text(re.sub(r"UserKnownHostsFile \S+", f"UserKnownHostsFile {empty}", text))
    config = remote.write_config(ssh_config=strict)
    before = {r.job_id for r in slurm.queue()}
    line = one_error(remote.cli("submit", "--gpus", "8", str(remote.script()), config=config), 9)
    assert f"ssh could not log in to {HOST}" in line
    assert "host key" in line
    assert {r.job_id for r in slurm.queue()} <= before  # no new job (an old one may be purged meanwhile)
    journal = remote.tmp_path / "state" / "journal.sqlite3"
    if journal.exists():
        with closing(Journal(journal, readonly=True)) as opened:
            assert opened.dispatches() == []


def test_a_shell_code_job_name_arrives_literal(remote: Remote, slurm: Cluster) -> None:
    """--name 'x; touch /tmp/pwned $(id)' is the job's name on the cluster; no file is created."""
    pwned = Path("/tmp/pwned")
    pwned.unlink(missing_ok=True)
    name = "x; touch /tmp/pwned $(id)"
    out = json_of(remote.cli("submit", "--json", "--gpus", "8", "--name", name, str(remote.script())))
    assert out["state"] == "RUNNING"
    assert _show_job(out["slurm_job_id"])["JobName"] == "x;"  # scontrol -o splits the name at its first space
    argv = ["squeue", "-h", "-j", out["slurm_job_id"], "-O", "Name:|"]
    shown = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert shown.stdout.strip().removesuffix("|") == name
    assert not pwned.exists()
    assert not list(Path("/tmp").glob("pwned*"))


def test_a_script_only_here_runs_on_the_cluster_in_remote_workdir(remote: Remote, slurm: Cluster) -> None:
    """The script's content travels with the sbatch: the job runs it, in remote_workdir, not at a local path."""
    marker = f"ran-{uuid.uuid4().hex[:8]}"
    script = remote.script(f"echo {marker} >{marker}.txt\nsleep 300")
    out = json_of(remote.cli("submit", "--json", "--gpus", "8", str(script)))
    assert out["state"] == "RUNNING"
    shown = _show_job(out["slurm_job_id"])
    assert shown["WorkDir"] == str(remote.workdir)
    assert shown.get("Command") != str(script)
    slurm.wait_for((remote.workdir / f"{marker}.txt").exists, "the job to write its marker")
    assert (remote.workdir / f"{marker}.txt").read_text().strip() == marker
    (remote.workdir / f"{marker}.txt").unlink()
    assert shutil.which("sbatch", path=remote.env["PATH"]) == str(remote.tmp_path / "stubs" / "sbatch")


def test_the_demo_walks_the_ladder_over_ssh(remote: Remote, slurm: Cluster) -> None:
    """`fellows-fsm demo` with a remote config walks to normal-eur over ssh, cleans up, and runs no SLURM here."""
    result = remote.cli("demo", "--cap", "3", timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert f"on {HOST} over ssh" in result.stdout
    assert "is RUNNING on normal-eur" in result.stdout
    slurm.wait_for(lambda: not slurm.live_ids(), "the demo's jobs to be gone", timeout=20)
    assert remote.local_calls() == []
