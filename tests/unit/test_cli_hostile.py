"""Hostile and broken input through the command line: no job value ever runs as code in a lane command, and every
bad path, file, variable or name is one line and its exit code, with nothing queued and the journal unchanged."""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm.scheduler.port import ReasonGroup, classify_reason
from tests.unit.cli_helpers import SchedulingFake, _toml, one_error_line, run, world


@pytest.fixture
def pwned() -> Iterator[Path]:
    """A file in /tmp that only an injected command would create (removed after the test)."""
    path = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    yield path
    path.unlink(missing_ok=True)


def hostile_name(pwned: Path) -> str:
    """A job name that is shell, perl and python code at once, with every kind of quote."""
    return f"x; touch {pwned}; echo $(id) `touch {pwned}` ' \" $(touch {pwned}) system('touch {pwned}')"


# --------------------------------------------------------------------------- item 2: no job value is code
# Each form reads the job name from $FSM_JOB_NAME (the only way it reaches a lane) and writes it to OUT.
SH_CODE = 'printf "%s\\n" "$FSM_JOB_NAME" > "OUT"'
FORMS: dict[str, list[str]] = {
    "sh -c": ["sh", "-c", SH_CODE],
    "sh -e -c": ["sh", "-e", "-c", SH_CODE],
    "sh -ec": ["sh", "-ec", SH_CODE],
    "sh -c --": ["sh", "-c", "--", SH_CODE],
    "sh -x -c": ["sh", "-x", "-c", SH_CODE],
    "bash -c": ["bash", "-c", SH_CODE],
    "bash -o pipefail -c": ["bash", "-o", "pipefail", "-c", SH_CODE],
    "bash -O extglob -c": ["bash", "-O", "extglob", "-c", SH_CODE],
    "bash --norc --noprofile -c": ["bash", "--norc", "--noprofile", "-c", SH_CODE],
    "bash -ec": ["bash", "-ec", SH_CODE],
    "/bin/bash -euo pipefail -c": ["/bin/bash", "-euo", "pipefail", "-c", SH_CODE],
    "dash -c": ["dash", "-c", SH_CODE],
    "dash -e -c": ["dash", "-e", "-c", SH_CODE],
    "zsh -c": ["zsh", "-c", SH_CODE],
    "zsh -f -c": ["zsh", "-f", "-c", SH_CODE],
    "env sh -c": ["env", "sh", "-c", SH_CODE],
    "env A=1 bash -c": ["env", "A=1", "bash", "-c", SH_CODE],
    "timeout 30 sh -c": ["timeout", "30", "sh", "-c", SH_CODE],
    "nohup sh -c": ["nohup", "sh", "-c", SH_CODE],
    "setsid -w sh -c": ["setsid", "-w", "sh", "-c", SH_CODE],
    "nice -n 5 sh -c": ["nice", "-n", "5", "sh", "-c", SH_CODE],
    "xargs sh -c": ["xargs", "sh", "-c", SH_CODE],
    "find -exec sh -c": ["find", "/", "-maxdepth", "0", "-exec", "sh", "-c", SH_CODE, ";"],
    "python3 -c": [sys.executable, "-c", "import os; open('OUT', 'w').write(os.environ['FSM_JOB_NAME'] + '\\n')"],
    "python3 -I -c": [
        sys.executable,
        "-I",
        "-c",
        "import os; open('OUT', 'w').write(os.environ['FSM_JOB_NAME'] + '\\n')",
    ],
    "perl -e": ["perl", "-e", 'open(my $f, ">", "OUT"); print $f "$ENV{{FSM_JOB_NAME}}\\n";'],
    "perl -E": ["perl", "-E", 'open(my $f, ">", "OUT"); say $f $ENV{{FSM_JOB_NAME}};'],
    "perl -we": ["perl", "-we", 'open(my $f, ">", "OUT"); print $f "$ENV{{FSM_JOB_NAME}}\\n";'],
    "ruby -e": ["ruby", "-e", 'File.write("OUT", ENV["FSM_JOB_NAME"] + "\\n")'],
    "node -e": ["node", "-e", 'require("fs").writeFileSync("OUT", process.env.FSM_JOB_NAME + "\\n")'],
    "awk BEGIN": ["awk", 'BEGIN {{ print ENVIRON["FSM_JOB_NAME"] > "OUT" }}'],
    "gawk -e": ["gawk", "-e", 'BEGIN {{ print ENVIRON["FSM_JOB_NAME"] > "OUT" }}'],
}
"""Every interpreter and wrapper a lane might run, with the option spellings that come before its code."""


def _program(argv: list[str]) -> str:
    """The program that reads the code: the last of the wrappers' programs that must be installed."""
    for item in argv:
        name = Path(item).name
        if name in {"zsh", "ruby", "node", "gawk"}:
            return item
    return argv[0]


def _lane(form: list[str], out: Path) -> str:
    """The TOML value of a lane command running ``form`` with its output file at ``out``."""
    return json.dumps([item.replace("OUT", str(out)) for item in form])


@pytest.mark.parametrize("form", list(FORMS), ids=list(FORMS))
def test_a_hostile_job_name_reaches_every_lane_form_as_data_only(
    env: Path, scheduling_fake: SchedulingFake, script: Path, pwned: Path, form: str
) -> None:
    """Whatever program a lane runs, a job name full of shell/perl/python reaches it through $FSM_JOB_NAME as
    text: the command sees it verbatim and nothing of it runs."""
    program = _program(FORMS[form])
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed here")
    out = env / "seen.txt"
    (env / "fellows.toml").write_text(_toml(env, gcp=_lane(FORMS[form], out)))
    name = hostile_name(pwned)
    result = run("submit", "--pin", "gcp", "--name", name, str(script))
    assert result.exit_code == 0, result.output
    assert out.read_text() == name + "\n"
    assert not pwned.exists()
    assert not scheduling_fake.jobs


@pytest.mark.parametrize("form", [*FORMS, "ssh remote command"], ids=[*FORMS, "ssh"])
@pytest.mark.parametrize("value", ["job_name", "script", "workdir"])
def test_a_job_value_placed_in_any_argv_is_refused_at_load(
    env: Path, scheduling_fake: SchedulingFake, script: Path, form: str, value: str
) -> None:
    """{job_name}, {script} or {workdir} anywhere in a lane's argv, whatever the program, is one config error
    naming the key and the environment variable to read instead; nothing is queued or journaled."""
    argv = ["ssh", "-o", "BatchMode=yes", "host", "cmd"] if form == "ssh remote command" else list(FORMS[form])
    argv[-1 if form != "find -exec sh -c" else -2] += f" {{{value}}}"
    (env / "fellows.toml").write_text(_toml(env, gcp=json.dumps(argv)))
    before = world(env, scheduling_fake)
    result = run("submit", "--pin", "gcp", str(script))
    assert result.exit_code == 3, result.output
    line = one_error_line(result)
    assert "[lanes.gcp] command" in line
    assert f"{{{value}}}" in line
    assert f"$FSM_{value.upper()}" in line
    assert world(env, scheduling_fake) == before


def test_a_job_value_in_a_probe_is_refused_too(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """A lane's probe is an argv too: {job_name} in it is refused at load, naming the probe."""
    text = _toml(env) + "probe = ['perl', '-E', 'exit 0 if q({job_name})']\n"
    (env / "fellows.toml").write_text(text)
    result = run("config", "check")
    assert result.exit_code == 3
    assert "[lanes.gcp] probe" in one_error_line(result)


# --------------------------------------------------------------------------- item 6: bad input is one line
def _refused_cleanly(env: Path, fake: SchedulingFake, before: object, code: int, *args: str) -> str:
    """Run fellows-fsm; assert it exited ``code`` with one error line, queued nothing, changed no journal."""
    result = run(*args)
    assert result.exit_code == code, result.output
    line = one_error_line(result)
    assert world(env, fake) == before
    assert not fake.jobs
    return line


def test_a_config_env_var_naming_a_directory_is_one_line(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FELLOWS_FSM_CONFIG pointing at a directory: exit 3, one line naming the variable and the directory."""
    monkeypatch.setenv("FELLOWS_FSM_CONFIG", str(env))
    line = _refused_cleanly(env, scheduling_fake, world(env, scheduling_fake), 3, "submit", str(script))
    assert "FELLOWS_FSM_CONFIG" in line
    assert str(env) in line
    assert "is a directory" in line


@pytest.mark.parametrize(
    "data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", b"\x7fELF\x02\x01\x01\x00\x00\x00\x00"], ids=["png", "elf"]
)
def test_a_binary_config_file_is_one_line(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch, data: bytes
) -> None:
    """A binary file as the config: exit 3, one line naming the file, no traceback."""
    binary = env / "config.bin"
    binary.write_bytes(data)
    monkeypatch.setenv("FELLOWS_FSM_CONFIG", str(binary))
    line = _refused_cleanly(env, scheduling_fake, world(env, scheduling_fake), 3, "submit", str(script))
    assert str(binary) in line


def test_a_lane_without_a_command_is_one_line(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """[lanes.gcp] without command: exit 3, one line saying the lane has no command (not a Python TypeError)."""
    (env / "fellows.toml").write_text(f'state_dir = "{env / "state"}"\n\n[lanes.gcp]\ntimeout_seconds = 60\n')
    line = _refused_cleanly(env, scheduling_fake, world(env, scheduling_fake), 3, "submit", str(script))
    assert "[lanes.gcp] has no command" in line
    assert "__init__" not in line


def test_an_empty_state_dir_variable_is_refused(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FELLOWS_FSM_STATE_DIR set but empty is refused (exit 3) instead of silently using the default."""
    (env / "fellows.toml").write_text(_toml(env).replace(f'state_dir = "{env / "state"}"', ""))
    monkeypatch.setenv("FELLOWS_FSM_STATE_DIR", "")
    monkeypatch.setenv("XDG_STATE_HOME", str(env / "xdg"))
    line = _refused_cleanly(env, scheduling_fake, world(env, scheduling_fake), 3, "submit", str(script))
    assert "FELLOWS_FSM_STATE_DIR=''" in line
    assert not (env / "xdg").exists()


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_a_script_that_is_not_a_file_is_one_line(env: Path, scheduling_fake: SchedulingFake, kind: str) -> None:
    """A missing script, a directory or a FIFO: exit 2 at once with one line naming it (a FIFO is never opened,
    so nothing hangs)."""
    path = env / f"job-{kind}"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    before = world(env, scheduling_fake)
    line = _refused_cleanly(env, scheduling_fake, before, 2, "submit", "--detach", str(path))
    assert str(path) in line
    assert {"missing": "does not exist", "directory": "is a directory", "fifo": "is a FIFO"}[kind] in line


@pytest.mark.parametrize("name", ["a\nb", "train\r", "x\x1b[31m"], ids=["newline", "carriage-return", "escape"])
def test_a_job_name_with_a_control_character_is_refused(
    env: Path, scheduling_fake: SchedulingFake, script: Path, name: str
) -> None:
    """A job name with a newline (or another control character) is refused naming it, before SLURM sees it."""
    line = _refused_cleanly(env, scheduling_fake, world(env, scheduling_fake), 2, "submit", "--name", name, str(script))
    assert repr(name) in line


def test_partition_down_reads_in_plain_words_in_history(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A job pending on PartitionDown waits out its rung (contention) and history says why in plain words."""
    assert classify_reason("PartitionDown") is ReasonGroup.CONTENTION
    scheduling_fake.scheduling = False
    dispatch_id = run("submit", "--detach", str(script)).stdout.strip()
    [job_id] = list(scheduling_fake.jobs)
    scheduling_fake.set_pending(job_id, "PartitionDown")
    assert run("watch").exit_code == 0  # walks the ladder to the gcp lane (nothing ever starts)
    history = run("history", dispatch_id).stdout
    assert "partition is down" in history
    assert "PartitionDown: pending" not in history
