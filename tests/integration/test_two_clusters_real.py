"""The second real SLURM cluster itself (tests/integration/two_clusters.py): up beside the first, reached over its
own sshd, configured unlike the first, ids alignable, its sshd stoppable; its own down leaves the first alone."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import tomllib
import uuid
from pathlib import Path

import pytest

from .conftest import DEV_SLURM, Cluster
from .two_clusters import DEV_SSHD, SecondCluster, _profile_env

pytestmark = pytest.mark.slurm


def _config(text: str) -> dict[str, str]:
    """``scontrol show config``'s ``Key = value`` lines as a dict."""
    return {m[1]: m[2].strip() for m in re.finditer(r"^(\w+)\s+= (.*)$", text, re.MULTILINE)}


def _over_ssh(second: SecondCluster, command: str) -> str:
    """Run one shell line over the inst sshd; its stdout, failing with its stderr if it did not exit 0."""
    proc = second.ssh(command)
    assert proc.returncode == 0, f"ssh {second.host} {command!r} exited {proc.returncode}: {proc.stderr.strip()}"
    return proc.stdout


def test_both_clusters_run_at_once_under_their_own_names(slurm: Cluster, second_slurm: SecondCluster) -> None:
    """The first cluster answers as "fellows" here and the second as "inst" over ssh, each on its own port."""
    first = _config(subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout)
    second = _config(_over_ssh(second_slurm, "scontrol show config"))
    assert (first["ClusterName"], second["ClusterName"]) == ("fellows", "inst")
    assert (first["SlurmctldPort"], second["SlurmctldPort"]) == ("6817", "6917")
    assert first["FirstJobId"] == second["FirstJobId"] == "1"
    assert second["SLURM_CONF"] == second_slurm.slurm_conf


def test_a_job_submitted_over_ssh_lands_on_the_second_cluster_and_not_the_first(
    slurm: Cluster, second_slurm: SecondCluster
) -> None:
    """sbatch over the inst sshd queues the job on inst (found by its comment), and the first queue never shows it."""
    token = f"two-{uuid.uuid4().hex[:8]}"
    options = " ".join((*second_slurm.job_args(), "--qos=inst-high", f"--gres={second_slurm.gres(1)}"))
    out = _over_ssh(second_slurm, f"sbatch --parsable --comment={token} {options} --wrap 'sleep 300'")
    job_id = out.strip().split(";")[0]
    assert [(r.job_id, r.qos) for r in second_slurm.queue() if r.comment == token] == [(job_id, "inst-high")]
    assert [r for r in slurm.queue() if r.comment == token] == []


def test_the_second_cluster_has_its_own_partition_account_qos_and_typed_gres(second_slurm: SecondCluster) -> None:
    """Over ssh: QoS inst-high/inst-low with an 8-GPU per-user cap, inst-other ungranted, no fellows tier; root's
    grants under inst-acct; partition h200 only for that account and QoS; node gres gpu:h200:32."""
    qos = _over_ssh(second_slurm, "sacctmgr -n -P show qos format=name,priority,maxwall,maxtrespu").splitlines()
    assert set(qos) == {
        "normal|0||",
        "inst-high|100000|2-00:00:00|gres/gpu=8",
        "inst-low|10000|7-00:00:00|gres/gpu=8",
        "inst-other|10000||",
    }
    assoc = _over_ssh(second_slurm, "sacctmgr -n -P show assoc where user=root format=account,qos,defaultqos")
    assert sorted(assoc.splitlines()) == ["inst-acct|inst-high,inst-low|inst-low", "root|normal|"]
    partition = _over_ssh(second_slurm, "scontrol -o show partition h200")
    assert {"PartitionName=h200", "AllowAccounts=inst-acct", "AllowQos=inst-high,inst-low", "Default=NO"} <= set(
        partition.split()
    )
    node = _over_ssh(second_slurm, "scontrol -o show node h200n01")
    assert "Gres=gpu:h200:32" in node.split()
    gres_conf = (second_slurm.runtime / "etc" / "gres.conf").read_text()
    assert "Name=gpu Type=h200 File=" in gres_conf


@pytest.mark.parametrize(
    ("options", "errors"),
    [
        ("--account=inst-acct --qos=inst-high", ("No partition specified",)),
        ("--partition=h200 --qos=inst-high", ("Invalid qos specification",)),
        # root's default account and QoS there: 22.05 names the account, 24.11 the QoS.
        (
            "--partition=h200",
            ("Invalid account or account/partition combination specified", "Invalid qos specification"),
        ),
        ("--partition=h200 --account=inst-acct --qos=inst-other", ("Invalid qos specification",)),
        ("--partition=h200 --account=inst-acct --qos=high-eur", ("Invalid qos specification",)),
    ],
    ids=["no-partition", "no-account", "only-the-partition", "ungranted-qos", "a-fellows-qos"],
)
def test_a_job_must_name_the_second_clusters_partition_account_and_qos(
    second_slurm: SecondCluster, options: str, errors: tuple[str, ...]
) -> None:
    """A job that leaves out the inst partition or account, or asks for a QoS not granted there, is refused."""
    proc = second_slurm.ssh(f"sbatch --parsable {options} --chdir={second_slurm.jobs_dir} -o /dev/null --wrap true")
    assert proc.returncode == 1
    assert any(error in proc.stderr for error in errors), proc.stderr
    assert second_slurm.live_ids() == []


def test_one_blocker_fills_a_tier_of_the_second_cluster(second_slurm: SecondCluster) -> None:
    """With this user's inst-high cap taken by one 8-GPU blocker, the next inst-high job pends on that cap while
    inst-low starts the same request at once."""
    second_slurm.occupy("inst-high")
    held = second_slurm.submit("inst-high", 8)
    free = second_slurm.submit("inst-low", 8)
    second_slurm.wait_for(lambda: second_slurm.row(free).state == "RUNNING", "the inst-low job to run")
    second_slurm.wait_for(
        lambda: (second_slurm.row(held).state, second_slurm.row(held).reason) == ("PENDING", "QOSMaxGRESPerUser"),
        "the second inst-high job to pend on the per-user cap",
    )


def test_align_job_ids_makes_the_next_ids_of_both_clusters_equal(slurm: Cluster, second_slurm: SecondCluster) -> None:
    """After the first cluster got three jobs ahead, align_job_ids makes the next job on each take the same id."""
    for _ in range(3):
        slurm.cancel(slurm.occupy("low-eur", 1)[0])
    expected = second_slurm.align_job_ids()
    first = subprocess.run(
        ["sbatch", "--parsable", "--hold", *slurm.job_args(), "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    second = second_slurm.run("sbatch", "--parsable", "--hold", *second_slurm.job_args(), "--wrap", "true")
    assert (first, second.stdout.strip()) == (str(expected), str(expected))


def test_the_lane_table_names_what_a_job_on_the_second_cluster_needs(second_slurm: SecondCluster) -> None:
    """lane_toml's host, options, partition, account, QoS and gres template submit a job that runs on inst over ssh."""
    lane = tomllib.loads(second_slurm.lane_toml())["lanes"]["inst"]
    gres = lane["gres"].format(gpus=2)
    remote = (
        f"sbatch --parsable --partition={lane['partition']} --account={lane['account']} --qos={lane['qos']} "
        f"--gres={gres} --chdir={lane['remote_workdir']} -o /dev/null --wrap 'sleep 300'"
    )
    argv = ["ssh", *lane["ssh_options"], "-o", "BatchMode=yes", lane["host"], remote]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    second_slurm.wait_for(lambda: second_slurm.row(job_id).state == "RUNNING", f"inst job {job_id} to run")
    assert (lane["kind"], second_slurm.row(job_id).qos) == ("slurm", "inst-high")


def test_the_second_sshd_stopped_fails_with_255_and_restarted_answers(second_slurm: SecondCluster) -> None:
    """sshd down: a new `ssh inst-cluster squeue` and one through an already open master both exit 255; sshd up:
    both work again."""
    # A socket path must stay under 108 bytes: pytest's tmp_path is too deep for one.
    short = Path(tempfile.mkdtemp(prefix="cm-", dir="/tmp"))
    master = ["-o", "ControlMaster=auto", "-o", f"ControlPath={short}/%C", "-o", "ControlPersist=60"]
    try:
        assert second_slurm.ssh("squeue -h", options=master).returncode == 0
        assert second_slurm.ssh("true", options=[*master, "-O", "check"]).returncode == 0
        second_slurm.sshd_down()
        assert not second_slurm.sshd_running()
        assert second_slurm.ssh("squeue -h").returncode == 255
        assert second_slurm.ssh("squeue -h", options=master).returncode == 255
        second_slurm.sshd_up()
        assert second_slurm.ssh("squeue -h").returncode == 0
        assert second_slurm.ssh("squeue -h", options=master).returncode == 0
        with second_slurm.sshd_stopped():
            assert second_slurm.ssh("squeue -h").returncode == 255
        assert second_slurm.ssh("squeue -h").returncode == 0
    finally:
        if not second_slurm.sshd_running():
            second_slurm.sshd_up()
        second_slurm.ssh("true", options=[*master, "-O", "exit"])
        shutil.rmtree(short, ignore_errors=True)


def test_down_of_the_second_cluster_leaves_the_first_and_its_jobs_running(
    slurm: Cluster, second_slurm: SecondCluster
) -> None:
    """dev-slurm down of inst stops every inst daemon and leaves the first cluster's daemons and running job as
    they were; inst comes up again afterwards."""
    blocker = slurm.occupy("high-eur", 1)[0]
    before = subprocess.run([str(DEV_SLURM), "status"], capture_output=True, text=True, check=True).stdout
    try:
        subprocess.run([str(DEV_SSHD), "down"], capture_output=True, env=_profile_env(), timeout=60, check=True)
        subprocess.run([str(DEV_SLURM), "down"], capture_output=True, env=_profile_env(), timeout=120, check=True)
        inst = subprocess.run(
            [str(DEV_SLURM), "status"], capture_output=True, text=True, env=_profile_env(), timeout=60, check=False
        )
        assert inst.returncode == 1
        assert all(line.endswith("- down") for line in inst.stdout.splitlines()), inst.stdout
        after = subprocess.run([str(DEV_SLURM), "status"], capture_output=True, text=True, check=True).stdout
        assert after == before
        assert slurm.row(blocker).state == "RUNNING"
    finally:
        subprocess.run([str(DEV_SLURM), "up"], capture_output=True, env=_profile_env(), timeout=900, check=True)
        subprocess.run([str(DEV_SSHD), "up"], capture_output=True, env=_profile_env(), timeout=600, check=True)
    assert _config(_over_ssh(second_slurm, "scontrol show config"))["ClusterName"] == "inst"
