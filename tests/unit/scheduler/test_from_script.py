"""``JobSpec.from_script``: a script's ``#SBATCH`` lines read as ``fellows-fsm submit SCRIPT`` reads them, with the
same refusals, and no import of the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fellows_fsm import JobSpec
from fellows_fsm.errors import UsageError
from tests.unit.cli_helpers import run


def _script(tmp_path: Path, body: str, name: str = "train.sbatch") -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/bash\n{body}sleep 1\n", encoding="utf-8")
    return path


def test_it_reads_gpus_time_and_name_from_the_sbatch_lines(tmp_path: Path) -> None:
    """GPUs, wall time and name come from the #SBATCH lines; the script path is made absolute."""
    path = _script(tmp_path, "#SBATCH --gres=gpu:8\n#SBATCH -t 1-00:00:00\n#SBATCH --job-name=train\n")
    spec = JobSpec.from_script(path)
    assert (spec.gpus, spec.time_limit_seconds, spec.name) == (8, 86_400, "train")
    assert spec.script == str(path.resolve())


def test_without_lines_it_is_named_after_the_file_with_no_gpus(tmp_path: Path) -> None:
    """A script with no #SBATCH line gives the file's stem as name, 0 GPUs and the partition's default time."""
    spec = JobSpec.from_script(str(_script(tmp_path, "", name="eval.sh")), extra_args=["--mem=4G"])
    assert (spec.name, spec.gpus, spec.time_limit_seconds, spec.extra_args) == ("eval", 0, None, ("--mem=4G",))


def test_the_arguments_given_win_over_the_lines(tmp_path: Path) -> None:
    """An argument given wins over its #SBATCH line, as a flag does on the command line."""
    path = _script(tmp_path, "#SBATCH --gpus=4\n#SBATCH --time=10:00\n#SBATCH -J a\n")
    spec = JobSpec.from_script(path, name="b", gpus=2, time_limit_seconds=60)
    assert (spec.name, spec.gpus, spec.time_limit_seconds) == ("b", 2, 60)


def test_lines_after_the_first_command_are_not_read(tmp_path: Path) -> None:
    """Like sbatch, reading stops at the first line that is neither blank nor a comment; the last value wins."""
    path = _script(tmp_path, "#SBATCH --gres=gpu:2\n#SBATCH --gres=gpu:4\necho hi\n#SBATCH --gres=gpu:8\n")
    assert JobSpec.from_script(path).gpus == 4


REFUSED = [
    ("#SBATCH --array=0-3\n", (), "'#SBATCH --array=0-3' is refused by fellows-fsm"),
    ("#SBATCH --gres=gpu:abc\n", (), "has no GPU count fellows-fsm can read"),
    ("#SBATCH --time=soon\n", (), "'soon' is not a SLURM time"),
    ("#SBATCH --job-name=\n", (), "is empty"),
    ("", ("--qos=high-eur",), "sbatch option '--qos=high-eur'"),
]


@pytest.mark.parametrize(("body", "extra", "words"), REFUSED, ids=["array", "gres", "time", "name", "qos"])
def test_it_refuses_what_submit_refuses_with_the_same_line(
    env: Path, body: str, extra: tuple[str, ...], words: str
) -> None:
    """A bad line or argument is refused in the one line `fellows-fsm submit` prints for the same script (exit 2)."""
    path = _script(env, body)
    with pytest.raises(UsageError) as caught:
        JobSpec.from_script(path, extra_args=extra)
    assert words in str(caught.value)
    assert caught.value.exit_code == 2
    result = run("submit", "--detach", str(path), "--", *extra)
    assert result.exit_code == 2
    assert str(caught.value) in " ".join(result.stderr.split())


def test_a_missing_script_is_refused_naming_it(tmp_path: Path) -> None:
    """A script that does not exist is refused before anything else, naming the path."""
    with pytest.raises(UsageError, match="does not exist"):
        JobSpec.from_script(tmp_path / "nope.sbatch")


def test_a_bad_argument_is_refused(tmp_path: Path) -> None:
    """gpus given as something else than a whole number is refused as ``JobSpec``'s check refuses it."""
    with pytest.raises(UsageError, match="is not a GPU count"):
        JobSpec.from_script(_script(tmp_path, ""), gpus=-1)


def test_the_api_reads_scripts_without_importing_the_command_line() -> None:
    """``JobSpec.from_script`` loads neither click nor the CLI modules (a fresh interpreter counts the imports)."""
    code = (
        "import sys, tempfile, os\nfrom fellows_fsm import JobSpec\n"
        "d = tempfile.mkdtemp(); p = os.path.join(d, 'j.sh'); open(p, 'w').write('#SBATCH --gpus=2\\ntrue\\n')\n"
        "assert JobSpec.from_script(p).gpus == 2\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'click' or m.startswith("
        "('fellows_fsm.cli', 'fellows_fsm.ui')))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == ""
