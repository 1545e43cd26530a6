"""A lane's render on the real local SLURM: the GPU request a job gets is the one the lane writes, whatever GPU
line the script has in another spelling (sbatch joins --gres, --gpus and --gpus-per-node into one request)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.render import LaneOptions
from fellows_fsm.slurm.runner import CommandRunner

from .conftest import Cluster, _run

pytestmark = pytest.mark.slurm


def _script_with(slurm: Cluster, line: str) -> str:
    """A sleeping job script whose #SBATCH lines ask for GPUs its own way."""
    path = Path(slurm.script(300))
    path.write_text(f"#!/bin/bash\n#SBATCH {line}\nsleep 300\n")
    return str(path)


def _gpus_and_nodes(job_id: str) -> tuple[int, int]:
    """The GPUs (gres/gpu of the job's TRES) and nodes SLURM gave or will give the job."""
    shown = _run(["scontrol", "show", "job", "-o", job_id]).stdout
    gpus = re.search(r"\b(?:Req)?TRES=\S*gres/gpu=(\d+)", shown)  # 24.11 says ReqTRES
    nodes = re.search(r"\bNumNodes=(\d+)", shown)
    assert gpus is not None, shown
    assert nodes is not None, shown
    return int(gpus[1]), int(nodes[1])


@pytest.mark.parametrize(
    ("lane", "line"),
    [
        pytest.param(LaneOptions(gpus_per_node="{gpus}"), "--gres=gpu:8", id="gpus-per-node-lane"),
        pytest.param(LaneOptions(), "--gpus=8", id="gres-lane"),
    ],
)
def test_a_scripts_gpu_line_in_another_spelling_never_changes_the_lanes_request(
    slurm: Cluster, lane: LaneOptions, line: str
) -> None:
    """A 4-GPU job whose script asks for 8 GPUs in another option than the lane's gets 4 GPUs on one node."""
    port = SlurmScheduler(CommandRunner(timeout_seconds=20), options=lane)
    spec = JobSpec("it-gpus", _script_with(slurm, line), gpus=4, extra_args=slurm.job_args())
    job_id = port.submit(spec, qos="normal-eur", token="fsm-render-r0")
    assert _gpus_and_nodes(job_id) == (4, 1)
    assert any(line in note and "overridden" in note for note in port.last_notes)
