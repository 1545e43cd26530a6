"""Snapshot tests of the sbatch argv rendered for a rung, over shell-hostile script paths."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import pytest

from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.render import format_deadline, format_time_limit, render_sbatch, script_qos

HOSTILE_SCRIPTS = [
    pytest.param("/jobs/train.sh", id="plain"),
    pytest.param("/jobs/my job/run it.sh", id="spaces"),
    pytest.param('/jobs/it\'s "quoted".sh', id="quotes"),
    pytest.param("/jobs/$HOME/${USER}.sh", id="dollar"),
    pytest.param("/jobs/a;rm -rf ~;b.sh", id="semicolon"),
    pytest.param("/jobs/`id` | tee >x && y.sh", id="backtick-pipe"),
]
EXTRA = ("--chdir=/scratch/run dir", "-o", "/dev/null")


def _spec(script: str, **kwargs: object) -> JobSpec:
    values: dict[str, object] = {"gpus": 8, "time_limit_seconds": 3600, "extra_args": EXTRA}
    values.update(kwargs)
    return JobSpec("train-1", script, **values)  # type: ignore[arg-type]


@pytest.mark.parametrize("script", HOSTILE_SCRIPTS)
def test_plain_render_snapshot(script: str) -> None:
    """Without QoS, token or deadline the argv is exactly the plain sbatch render, script verbatim last."""
    command = render_sbatch(_spec(script), qos=None, token=None, deadline=None)
    assert command.argv == (
        "sbatch",
        "--parsable",
        "--job-name=train-1",
        "--gres=gpu:8",
        "--time=60",
        "--chdir=/scratch/run dir",
        "-o",
        "/dev/null",
        script,
    )
    assert command.notes == ()


@pytest.mark.parametrize("script", HOSTILE_SCRIPTS)
def test_rung_render_snapshot(script: str) -> None:
    """A rung adds --qos, --comment and --deadline in a fixed place, before extra_args and the script."""
    deadline = datetime(2030, 1, 2, 3, 4, 5).timestamp()
    command = render_sbatch(_spec(script), qos="normal-eur", token="fsm-d1-r1", deadline=deadline, now=deadline - 600)
    assert command.argv == (
        "sbatch",
        "--parsable",
        "--job-name=train-1",
        "--qos=normal-eur",
        "--comment=fsm-d1-r1",
        "--gres=gpu:8",
        "--time=60",
        "--deadline=now+600",
        "--chdir=/scratch/run dir",
        "-o",
        "/dev/null",
        script,
    )


@pytest.mark.parametrize("script", HOSTILE_SCRIPTS)
def test_rung_render_minus_rung_options_is_plain_render(script: str) -> None:
    """Removing the rung's three options from a rung render gives back the plain render byte for byte."""
    spec = _spec(script)
    rung = render_sbatch(spec, qos="high-eur", token="fsm-x-r0", deadline=2_000_000_000.0).argv
    plain = render_sbatch(spec, qos=None, token=None, deadline=None).argv
    stripped = tuple(a for a in rung if not a.startswith(("--qos=", "--comment=", "--deadline=")))
    assert stripped == plain


def test_minimal_spec_has_no_gres_or_time() -> None:
    """A CPU job without a time limit gets neither --gres nor --time."""
    spec = JobSpec("cpu", "/jobs/cpu.sh")
    assert render_sbatch(spec, qos=None, token=None, deadline=None).argv == (
        "sbatch",
        "--parsable",
        "--job-name=cpu",
        "/jobs/cpu.sh",
    )


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        pytest.param(60, "1", id="one-minute"),
        pytest.param(3600, "60", id="one-hour"),
        pytest.param(86_340, "1439", id="under-a-day"),
        pytest.param(90, "0-00:01:30", id="odd-seconds"),
        pytest.param(86_400, "1-00:00:00", id="one-day"),
        pytest.param(8 * 86_400, "8-00:00:00", id="eight-days"),
        pytest.param(2 * 86_400 + 3 * 3600 + 4 * 60 + 5, "2-03:04:05", id="mixed"),
    ],
)
def test_format_time_limit(seconds: int, expected: str) -> None:
    """Whole minutes under a day render as minutes, everything else as D-HH:MM:SS."""
    assert format_time_limit(seconds) == expected


def test_format_time_limit_refuses_non_positive() -> None:
    """A zero time limit is a bug in the caller, not something to pass to sbatch."""
    with pytest.raises(ValueError, match="must be positive"):
        format_time_limit(0)


@pytest.mark.parametrize("epoch", [1_900_000_000.0, 1_900_000_000.2, 1_900_000_000.999])
def test_format_deadline_is_relative_rounded_up(epoch: float) -> None:
    """The deadline is seconds from now (no wall time in anyone's zone), never earlier than asked (rounded up)."""
    text = format_deadline(epoch, 1_899_999_000.0)
    assert text == f"now+{math.ceil(epoch - 1_899_999_000.0)}"


@pytest.mark.parametrize(
    "line",
    [
        pytest.param("#SBATCH --qos=normal", id="equals"),
        pytest.param("#SBATCH --qos normal", id="space"),
        pytest.param("#SBATCH -q normal", id="short"),
        pytest.param("#SBATCH -qnormal", id="short-joined"),
        pytest.param("#SBATCH --gres=gpu:1 --qos=normal  # keep", id="with-other-options"),
    ],
)
def test_script_qos_line_is_noted_as_overridden(tmp_path: Path, line: str) -> None:
    """An #SBATCH QoS line in the script yields a note naming the script and both QoS."""
    script = tmp_path / "my job.sh"
    script.write_text(f"#!/bin/bash\n# a comment\n\n{line}\nsleep 1\n")
    command = render_sbatch(JobSpec("j", str(script)), qos="high-eur", token=None, deadline=None)
    assert len(command.notes) == 1
    note = command.notes[0]
    assert str(script) in note
    assert "normal" in note
    assert "--qos=high-eur" in note
    assert "overridden" in note


def test_script_qos_after_first_command_is_ignored(tmp_path: Path) -> None:
    """sbatch stops reading #SBATCH lines at the first command, and so does the note."""
    script = tmp_path / "late.sh"
    script.write_text("#!/bin/bash\necho start\n#SBATCH --qos=normal\n")
    assert script_qos(str(script)) is None


def test_same_qos_in_script_gives_no_note(tmp_path: Path) -> None:
    """A script asking for the rung's own QoS needs no note."""
    script = tmp_path / "same.sh"
    script.write_text("#!/bin/bash\n#SBATCH --qos=high-eur\nsleep 1\n")
    assert render_sbatch(JobSpec("j", str(script)), qos="high-eur", token=None, deadline=None).notes == ()


def test_plain_render_never_reads_for_qos_notes(tmp_path: Path) -> None:
    """Without a rung QoS nothing is overridden, so there is no note even if the script names a QoS."""
    script = tmp_path / "q.sh"
    script.write_text("#!/bin/bash\n#SBATCH --qos=normal\nsleep 1\n")
    assert render_sbatch(JobSpec("j", str(script)), qos=None, token=None, deadline=None).notes == ()


def test_unreadable_script_has_no_qos() -> None:
    """A script that cannot be read gives no QoS (sbatch reports the missing file itself)."""
    assert script_qos("/nonexistent/dir/job.sh") is None
