"""lanes/gcp_batch/machines.py and the naming rules of lanes/gcp_batch/client.py: the VM a job's GPU count maps to, the
counts and accelerators refused in plain words, a job id and labels the API accepts; none of it needs the [gcp]
extra, and importing the lane's modules never loads Google's library."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import fellows_fsm
from fellows_fsm.lanes.gcp_batch.client import job_id_for, label_value
from fellows_fsm.lanes.gcp_batch.errors import MachineRefused
from fellows_fsm.lanes.gcp_batch.machines import Machine, machine_for

JOB_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


@pytest.mark.parametrize(
    ("gpus", "accelerator", "machine_type"),
    [
        (1, "nvidia-h100-80gb", "a3-highgpu-1g"),
        (8, "nvidia-h100-80gb", "a3-highgpu-8g"),
        (16, "nvidia-tesla-a100", "a2-megagpu-16g"),
        (4, "nvidia-a100-80gb", "a2-ultragpu-4g"),
        (2, "nvidia-l4", "g2-standard-24"),
    ],
    ids=["h100x1", "h100x8", "a100x16", "a100-80x4", "l4x2"],
)
def test_a_bundled_accelerator_maps_the_gpu_count_to_its_machine_type(
    gpus: int, accelerator: str, machine_type: str
) -> None:
    """An accelerator-optimized family's machine type follows from the GPU count, with the GPUs on it."""
    assert machine_for(gpus, accelerator) == Machine(machine_type, accelerator, gpus)


def test_a_count_no_vm_has_is_refused_with_the_counts_there_are() -> None:
    """3 H100s: no single machine has exactly that many; the message names the counts one VM has."""
    with pytest.raises(
        MachineRefused, match=r"no GCP machine has exactly 3 nvidia-h100-80gb GPUs \(one VM has 1, 2, 4, 8\)"
    ):
        machine_for(3, "nvidia-h100-80gb")


def test_a_machine_type_with_another_gpu_count_than_the_job_is_refused() -> None:
    """A lane's a3-highgpu-8g for a 4-GPU job would pay for 8: refused, naming both counts."""
    with pytest.raises(MachineRefused, match="a3-highgpu-8g has 8 nvidia-h100-80gb GPUs and this job asks for 4"):
        machine_for(4, "nvidia-h100-80gb", "a3-highgpu-8g")
    assert machine_for(8, "nvidia-h100-80gb", "a3-highgpu-8g") == Machine("a3-highgpu-8g", "nvidia-h100-80gb", 8)


def test_attached_gpus_need_the_lanes_n1_machine_type() -> None:
    """T4s attach to an N1 machine the lane names: without machine_type refused, with it taken as given."""
    with pytest.raises(MachineRefused, match="set the lane's machine_type"):
        machine_for(2, "nvidia-tesla-t4")
    assert machine_for(2, "nvidia-tesla-t4", "n1-standard-8") == Machine("n1-standard-8", "nvidia-tesla-t4", 2)
    with pytest.raises(MachineRefused, match="one VM takes 1, 2, 4 nvidia-tesla-t4 GPUs, not 8"):
        machine_for(8, "nvidia-tesla-t4", "n1-standard-32")


def test_an_unknown_accelerator_is_refused_unless_the_lane_names_a_machine_type() -> None:
    """An accelerator this table does not know is named with the known ones; with a machine_type it is sent to GCP
    as it is (the API judges it)."""
    with pytest.raises(MachineRefused, match="unknown accelerator 'nvidia-h1000' \\(known here: nvidia-a100-80gb"):
        machine_for(8, "nvidia-h1000")
    assert machine_for(8, "nvidia-h1000", "a9-x-8g") == Machine("a9-x-8g", "nvidia-h1000", 8)


def test_a_job_with_no_gpu_needs_a_machine_type() -> None:
    """0 GPUs: no accelerator, and the lane's machine_type is required."""
    with pytest.raises(MachineRefused, match="a job with no GPU needs the lane's machine_type"):
        machine_for(0, "nvidia-h100-80gb")
    assert machine_for(0, "nvidia-h100-80gb", "n2-standard-8") == Machine("n2-standard-8", None, 0)


@pytest.mark.parametrize(
    "dispatch_id",
    ["0123456789ab", "My_Run.7", "a" * 80, "--", "ÄÖ", "x-"],
    ids=["hex", "mixed", "long", "dashes", "non-ascii", "trailing-dash"],
)
def test_every_dispatch_id_makes_a_job_id_the_api_accepts(dispatch_id: str) -> None:
    """The job id of any dispatch id matches the API's rule, and is the same on every call."""
    job_id = job_id_for(dispatch_id)
    assert JOB_ID.match(job_id), job_id
    assert job_id_for(dispatch_id) == job_id


def test_a_plain_dispatch_id_is_kept_and_two_awkward_ones_never_share_a_name() -> None:
    """fsm-<id> for the usual 12 hex digits; ids that differ only in what the API's alphabet drops stay apart."""
    assert job_id_for("0123456789ab") == "fsm-0123456789ab"
    assert job_id_for("A_b") != job_id_for("a-b")
    assert job_id_for("A_b") != job_id_for("a_b")


def test_a_label_value_is_kept_when_valid_and_made_valid_and_distinct_otherwise() -> None:
    """A lane or dispatch name already valid as a label value is kept; another is made valid, two never collide."""
    assert label_value("gcp") == "gcp"
    assert label_value("0123456789ab") == "0123456789ab"
    made = {label_value("GCP"), label_value("gcp!"), label_value("x" * 70)}
    assert all(re.fullmatch(r"[a-z0-9_-]{1,63}", value) for value in made)
    assert label_value("GCP") != label_value("gcp")


def test_the_lanes_modules_import_without_googles_library(tmp_path: Path) -> None:
    """With google unimportable, the client module, the machine table and the fake import; ``import fellows_fsm``
    and the client module load no google module (the [gcp] extra is imported only when a client is made), and
    making a client says in one line which extra to install."""
    src = Path(fellows_fsm.__file__).parents[1]
    code = (
        f"import sys\nsys.path.insert(0, {str(src)!r})\nsys.modules['google'] = None\n"
        "import fellows_fsm, fellows_fsm.lanes.gcp_batch.client, fellows_fsm.lanes.gcp_batch.machines\n"
        "import fellows_fsm.lanes.gcp_batch.fake\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'google' and sys.modules[m] is not None))\n"
        "from fellows_fsm.lanes.gcp_batch.errors import BatchError\n"
        "from fellows_fsm.lanes.gcp_batch.client import BatchClient, BatchLocation\n"
        "try:\n    BatchClient.connect(BatchLocation('p', 'r'))\nexcept BatchError as error:\n    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "[]",
        "the GCP Batch lane needs Google's client library: pip install 'fellows-fsm[gcp]'",
    ]


def test_the_gcp_extra_holds_googles_batch_client_and_the_core_install_does_not() -> None:
    """pyproject.toml: google-cloud-batch is the ``[gcp]`` extra only, pinned to a range; no core dependency and
    no other extra (``[dev]`` included) pulls a google package in."""
    project = tomllib.loads((Path(fellows_fsm.__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["gcp"] == ["google-cloud-batch>=0.17.30,<0.23"]
    others = [*project["dependencies"]] + [
        dep for extra, deps in project["optional-dependencies"].items() if extra != "gcp" for dep in deps
    ]
    assert [dep for dep in others if dep.startswith("google")] == []
