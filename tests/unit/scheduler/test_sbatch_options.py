"""The sbatch options fellows-fsm refuses, in every spelling sbatch reads (long, abbreviated, short, clustered,
``=value`` or the next word), after ``--`` and in ``#SBATCH`` lines; and the ones it lets through."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm.errors import UsageError
from fellows_fsm.scheduler.options import OWNED_OPTIONS, SBATCH_LONG_OPTIONS, SCRIPT_READ, owned_option
from fellows_fsm.scheduler.script import read_script_defaults

REFUSED = [
    ("--wait",),
    ("-W",),
    ("-vW",),
    ("--wai",),
    ("--gpus-per-node=2",),
    ("--gpus-per-node", "2"),
    ("--gpus-per-n=2",),
    ("--gpus-per-task=1",),
    ("--gpus-per-socket=1",),
    ("--tres-per-task=gres/gpu:2",),
    ("--gres=gpu:2",),
    ("--gres", "gpu:2"),
    ("-G", "2"),
    ("-G2",),
    ("--gpus=2",),
    ("-t", "5"),
    ("-t5",),
    ("--time=5",),
    ("--time-min=5",),
    ("-q", "low-eur"),
    ("-vq", "low-eur"),
    ("--qo=low-eur",),
    ("-M", "other"),
    ("--clusters=other",),
    ("--clu=other",),
    ("--comment=x",),
    ("--deadline=now+1hour",),
    ("-H",),
    ("--hold",),
    ("-a", "0-3"),
    ("--array=0-3",),
    ("--test-only",),
    ("--parsable",),
    ("-Q",),
    ("--quiet",),
    ("--wrap=hostname",),
    ("-b", "now+1hour"),
    ("--begin=now+1hour",),
    ("-d", "afterok:1"),
    ("--dependency=afterok:1",),
    ("-N", "2"),
    ("-N2",),
    ("--nodes=2",),
    ("--nodes", "1-4"),
    ("--help",),
    ("-h",),
    ("--usage",),
    ("-V",),
    ("--version",),
    ("--uid=1000",),
    ("--get-user-env",),
    ("--mem=4G", ":", "--mem=4G"),
]
ALLOWED = [
    ("--mem=64G",),
    ("-p", "gpu"),
    ("--partition=gpu",),
    ("--exclusive",),
    ("-v",),
    ("-N", "1"),
    ("--nodes=1",),
    ("-n", "4"),
    ("--cpus-per-gpu=8",),
    ("--mem-per-gpu=16G",),
    ("--chdir=/scratch",),
    ("-o", "out-%j.txt"),
    ("--export=ALL",),
    ("-k",),
    ("--requeue",),
]


@pytest.mark.parametrize("args", REFUSED, ids=" ".join)
def test_every_spelling_of_a_refused_option_is_refused(args: tuple[str, ...]) -> None:
    """Each spelling of an option that makes sbatch wait, changes what fellows-fsm counts or how it reads the
    reply is refused, naming the argument and why."""
    owned = owned_option(args)
    assert owned is not None
    assert owned[0] in args
    assert owned[1]


@pytest.mark.parametrize("args", ALLOWED, ids=" ".join)
def test_options_fellows_fsm_does_not_need_pass(args: tuple[str, ...]) -> None:
    """Options that change nothing fellows-fsm counts or reads pass through."""
    assert owned_option(args) is None


def test_every_refused_option_is_an_sbatch_option() -> None:
    """The table names only real sbatch options (so an abbreviation is read as sbatch reads it)."""
    assert {name.removeprefix("--") for name in OWNED_OPTIONS} <= SBATCH_LONG_OPTIONS


def test_the_usage_table_lists_every_refused_option() -> None:
    """docs/usage.md has a row for every refused option (the table users read)."""
    usage = (Path(__file__).resolve().parents[3] / "docs" / "usage.md").read_text()
    for name in [*OWNED_OPTIONS, "--nodes", ":"]:
        assert f"`{name}" in usage, name


@pytest.mark.parametrize(
    "line", ["#SBATCH --wait", "#SBATCH --gpus-per-node=2", "#SBATCH -W", "#SBATCH --array=1-3", "#SBATCH -N 2"]
)
def test_a_refused_option_in_an_sbatch_line_is_refused(tmp_path: Path, line: str) -> None:
    """A script whose #SBATCH line asks for a refused option is a usage error naming the file, line and option."""
    script = tmp_path / "job.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --mem=4G\n{line}\nsleep 1\n")
    with pytest.raises(UsageError, match=rf"job.sbatch:3: '#SBATCH {line.split()[1]}"):
        read_script_defaults(script)


@pytest.mark.parametrize("option", sorted(SCRIPT_READ))
def test_options_fellows_fsm_reads_or_overrides_may_stay_in_the_script(tmp_path: Path, option: str) -> None:
    """#SBATCH --gres, --time, --job-name, --qos, --comment stay allowed in a script: the command line wins."""
    value = {"--gres": "gpu:8", "--gpus": "8", "--time": "10"}.get(option, "x")
    script = tmp_path / "job.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH {option}={value}\nsleep 1\n")
    read_script_defaults(script)
