"""The options a lane owns on every sbatch override the script's #SBATCH lines for them, with a note per value
overridden; a user's own --partition/--account after -- stays and the lane's wins after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.render import LaneOptions, render_sbatch, script_options

INST = LaneOptions(partition="h200", account="lab-acct", gres="gpu:h200:{gpus}", lane="inst")


def _script(tmp_path: Path, *lines: str) -> str:
    """A job script with these #SBATCH lines, then a command."""
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {line}\n" for line in lines) + "srun hostname\n")
    return str(path)


def _render(script: str, lane: LaneOptions = INST, **spec: object) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The argv and notes of inst's rung inst-high for an 8-GPU, 1-hour job of ``script`` (``spec`` overrides)."""
    values: dict[str, object] = {"gpus": 8, "time_limit_seconds": 3600}
    values.update(spec)
    job = JobSpec("train", script, **values)  # type: ignore[arg-type]
    command = render_sbatch(job, qos="inst-high", token="fsm-d-r3", deadline=None, lane=lane)
    return command.argv, command.notes


@pytest.mark.parametrize(
    ("line", "option", "ours"),
    [
        pytest.param("--partition=gpu", "--partition", "h200", id="partition"),
        pytest.param("-p gpu", "--partition", "h200", id="partition-short"),
        pytest.param("--part=gpu", "--partition", "h200", id="partition-abbreviated"),
        pytest.param("--account old", "--account", "lab-acct", id="account"),
        pytest.param("-Aold", "--account", "lab-acct", id="account-short-joined"),
        pytest.param("--job-name=mine", "--job-name", "train", id="job-name"),
        pytest.param("-J mine", "--job-name", "train", id="job-name-short"),
        pytest.param("--comment=mine", "--comment", "fsm-d-r3", id="comment"),
        pytest.param("--time=2:00:00", "--time", "60", id="time"),
        pytest.param("-q normal", "--qos", "inst-high", id="qos"),
        pytest.param("--gres=gpu:8", "--gres", "gpu:h200:8", id="gres"),
    ],
)
def test_a_scripts_owned_line_is_overridden_by_the_lane_with_a_note(
    tmp_path: Path, line: str, option: str, ours: str
) -> None:
    """Each owned option the script sets differently is set on the command line and named in one note."""
    argv, notes = _render(_script(tmp_path, line, "--mem=4G"))
    assert f"{option}={ours}" in argv
    assert argv[-1].endswith("job.sh")
    (note,) = notes
    assert f"'#SBATCH {option}=" in note
    assert f"{option}={ours}" in note
    assert "overridden" in note


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("--time=1:00:00", id="same-time-written-otherwise"),
        pytest.param("--partition=h200", id="same-partition"),
        pytest.param("--gres=gpu:h200:8", id="same-gres"),
        pytest.param("--mem=4G", id="not-owned"),
    ],
)
def test_a_line_asking_for_what_the_lane_sets_gives_no_note(tmp_path: Path, line: str) -> None:
    """A script line with the lane's own value (or an option the lane does not own) needs no note."""
    assert _render(_script(tmp_path, line))[1] == ()


def test_a_partition_line_is_left_to_sbatch_on_a_lane_that_sets_none(tmp_path: Path) -> None:
    """On a lane with no partition the script's #SBATCH --partition is not the lane's to override."""
    argv, notes = _render(_script(tmp_path, "--partition=gpu"), lane=LaneOptions())
    assert not any(a.startswith("--partition") for a in argv)
    assert notes == ()


def test_a_gpus_per_node_lane_cancels_the_scripts_gres_but_keeps_its_other_gres(tmp_path: Path) -> None:
    """A script's --gres=gpu:8,nvme:1 on a --gpus-per-node lane becomes --gres=nvme:1 before the lane's request."""
    lane = LaneOptions(gpus_per_node="h200:{gpus}", lane="lrz")
    argv, notes = _render(_script(tmp_path, "--gres=gpu:8,nvme:1"), lane=lane, gpus=4)
    assert argv[argv.index("--gres=nvme:1") + 1] == "--gpus-per-node=h200:4"
    (note,) = notes
    assert "'#SBATCH --gres=gpu:8,nvme:1'" in note
    assert "--gpus-per-node=h200:4" in note


def test_a_scripts_gpus_line_is_set_to_zero_before_the_lanes_gres(tmp_path: Path) -> None:
    """A script's --gpus=8 under a 4-GPU job is cancelled with --gpus=0 and the lane's --gres asks for 4."""
    argv, notes = _render(_script(tmp_path, "--gpus=8"), gpus=4)
    assert argv[argv.index("--gpus=0") + 1] == "--gres=gpu:h200:4"
    (note,) = notes
    assert "'#SBATCH --gpus=8'" in note


def test_a_cpu_job_leaves_the_scripts_gpu_lines_alone(tmp_path: Path) -> None:
    """A job of no GPUs adds no GPU option at all, as before lanes had their own request."""
    argv, _ = _render(_script(tmp_path, "--gres=gpu:8", "--gpus=2"), gpus=0)
    assert not any(a.startswith(("--gres", "--gpus")) for a in argv)


def test_a_users_partition_after_dashes_is_kept_and_the_lanes_comes_after_it(tmp_path: Path) -> None:
    """A user's --partition/-A after -- stays in the argv, the lane's comes later (sbatch takes the last), noted."""
    argv, notes = _render(_script(tmp_path), extra_args=("--partition=mine", "-A", "their-acct"))
    assert argv.index("--partition=mine") < argv.index("--partition=h200")
    assert argv.index("their-acct") < argv.index("--account=lab-acct")
    assert len(notes) == 2
    assert all("after --" in note and "lane inst" in note for note in notes)


def test_a_users_partition_passes_unnoted_on_a_lane_that_sets_none(tmp_path: Path) -> None:
    """On a lane with no partition of its own a user's --partition is the job's, with no note."""
    argv, notes = _render(_script(tmp_path), lane=LaneOptions(), extra_args=("--partition=mine",))
    assert "--partition=mine" in argv
    assert notes == ()


def test_script_options_reads_as_sbatch_does(tmp_path: Path) -> None:
    """The last value of each option wins, a trailing comment is no value, and lines after the first command
    are not read."""
    path = tmp_path / "s.sh"
    path.write_text("#!/bin/bash\n#SBATCH -p a\n#SBATCH --partition=b  # the real one\necho\n#SBATCH -p c\n")
    assert script_options(str(path)) == {"--partition": "b"}
