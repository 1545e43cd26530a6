"""Where a SLURM job's output file is (scontrol, sacct on 24.11 and 22.05, the job's own options) and its bytes read
here or through the ssh quoting a real shell runs: all without a cluster (MockRunner)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fellows_fsm.errors import LogMissing
from fellows_fsm.scheduler.script import read_script_defaults
from fellows_fsm.slurm.logs import (
    JobFacts,
    OutputFiles,
    OutputPatterns,
    expand_pattern,
    locate,
    output_settings,
    parse_scontrol,
    read_chunk,
)
from fellows_fsm.slurm.mock import MockRunner
from fellows_fsm.slurm.transport import Reply, Request, remote_command

JOB = JobFacts("812", "train", "ana", "gpu01")
SCONTROL_2205 = (
    "JobId=812 JobName=train UserId=ana(1000) JobState=COMPLETED WorkDir=/w/d StdErr=/w/d/err-812.txt "
    "StdIn=/dev/null StdOut=/w/d/out-812-train-%%.txt Power= TresPerNode=gres:gpu:1\n"
)
UNKNOWN_JOB = (1, "", "slurm_load_jobs error: Invalid job id specified")


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("slurm-%j.out", "slurm-812.out"),
        ("%x-%u-%j.log", "train-ana-812.log"),
        ("100%%-%j", "100%-812"),
        ("%A_%a.out", "812_4294967294.out"),
        ("%N/%n-%t-%s", "gpu01/0-0-0"),
        ("%8j.out", "00000812.out"),
        ("%q-%j%", "%q-812%"),
    ],
    ids=["j", "x-u", "percent", "array", "node-task-step", "padded", "unknown-kept"],
)
def test_a_pattern_expands_as_sbatch_does(pattern: str, expected: str) -> None:
    """%j %x %u %A %a %N %n %t %s and %% expand; a width pads a number; anything else stays as written."""
    assert expand_pattern(pattern, JOB) == expected


def test_the_command_lines_option_wins_over_the_scripts_line_in_every_spelling() -> None:
    """--output=F, -o F, -oF, --error F and -D override what was journaled from #SBATCH; the rest is kept."""
    kept = {"output": "script-%j.out", "error": "script-%j.err", "chdir": "/from/script"}
    assert OutputPatterns.of(kept, ()) == OutputPatterns("script-%j.out", "script-%j.err", "/from/script")
    assert OutputPatterns.of(kept, ("--output=a.out",)).output == "a.out"
    assert OutputPatterns.of(kept, ("-o", "b.out", "--mem=1G")).output == "b.out"
    assert OutputPatterns.of(kept, ("-oc.out",)).output == "c.out"
    assert OutputPatterns.of(kept, ("--error", "e.err")).error == "e.err"
    assert OutputPatterns.of(kept, ("-D", "/cli")).chdir == "/cli"
    assert OutputPatterns.of(None, ("--exclusive",)) == OutputPatterns()


def test_the_scripts_output_error_and_chdir_are_what_is_journaled(tmp_path: Path) -> None:
    """#SBATCH --output/-e/--chdir are read up to the first command (sbatch's rule); a script without them: {}."""
    script = tmp_path / "job.sh"
    lines = ["#!/bin/bash", "#SBATCH --output=o-%j.txt", "#SBATCH -e e-%j.txt", "#SBATCH -D /x", "echo", "#SBATCH -o x"]
    script.write_text("\n".join(lines) + "\n")
    assert output_settings(script) == {"output": "o-%j.txt", "error": "e-%j.txt", "chdir": "/x"}
    assert read_script_defaults(script).output == "o-%j.txt"
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/bash\necho hi\n")
    assert output_settings(plain) == {}
    assert output_settings(tmp_path / "gone.sh") == {}


def test_scontrols_line_gives_stdout_and_stderr_with_2205s_double_percent_undone() -> None:
    """22.05 shows '%%' of the pattern as written (the file has '%'); a (null) or missing field is left out."""
    assert parse_scontrol(SCONTROL_2205) == {
        "StdOut": "/w/d/out-812-train-%.txt",
        "StdErr": "/w/d/err-812.txt",
        "WorkDir": "/w/d",
    }
    assert parse_scontrol("JobId=1 StdErr=(null) StdOut=/a b/slurm-1.out Power=") == {"StdOut": "/a b/slurm-1.out"}


NONE = OutputPatterns()


def _locate(runner: MockRunner, patterns: OutputPatterns = NONE, workdir: str | None = "/sub") -> OutputFiles:
    return locate(runner, "812", patterns, name="train", user=lambda: "ana", workdir=workdir)


def test_where_scontrol_knows_the_job_it_is_asked_alone() -> None:
    """scontrol's StdOut/StdErr are taken as they are; sacct is never asked."""
    runner = MockRunner.scripted({"scontrol": [(0, SCONTROL_2205, "")]})
    found = _locate(runner)
    assert (found.stdout, found.stderr, found.source) == ("/w/d/out-812-train-%.txt", "/w/d/err-812.txt", "scontrol")
    assert [a[0] for a in runner.argvs] == ["scontrol"]
    assert runner.argvs[0] == ("scontrol", "show", "job", "-o", "812")


def test_a_purged_job_on_2411_is_where_saccts_expanded_stdout_says() -> None:
    """scontrol no longer knows it: sacct --expand-patterns StdOut/StdErr (an empty StdErr: stderr went to StdOut)."""
    runner = MockRunner.scripted(
        {"scontrol": [UNKNOWN_JOB], "sacct": [(0, "/w|train|ana|gpu01|/w/slurm-812.out|\n", "")]}
    )
    found = _locate(runner)
    assert (found.stdout, found.stderr, found.source) == ("/w/slurm-812.out", "/w/slurm-812.out", "sacct")
    assert "--expand-patterns" in runner.argvs[1]


def test_a_purged_job_on_2205_is_its_journaled_pattern_in_saccts_workdir() -> None:
    """22.05's sacct refuses StdOut: asked again for WorkDir, JobName, User, NodeList; the job's own --output and
    --error patterns are expanded with those words, in that directory (an absolute pattern stays absolute)."""
    refused = (1, "", 'sacct: error: Invalid field requested: "StdOut"')
    runner = MockRunner.scripted(
        {"scontrol": [UNKNOWN_JOB], "sacct": [refused, (0, "/acct/dir|named|bob|gpu[01-02]\n", "")]}
    )
    found = _locate(runner, OutputPatterns("o-%x-%u-%N-%j.txt", "/abs/e-%j.txt"))
    assert (found.stdout, found.stderr) == ("/acct/dir/o-named-bob-gpu-812.txt", "/abs/e-812.txt")
    assert found.source == "sacct"
    assert runner.argvs[2] == ("sacct", "-X", "-n", "-P", "-j", "812", "-o", "WorkDir,JobName,User,NodeList")


def test_an_accounting_record_without_its_details_is_not_believed() -> None:
    """slurmdbd's first record of a job may lack its details for a few seconds, even after its end (22.05 seen:
    JobName "allocation", no WorkDir): its name is never expanded into the path; the job's own name and options are."""
    refused = (1, "", 'sacct: error: Invalid field requested: "StdOut"')
    runner = MockRunner.scripted({"scontrol": [UNKNOWN_JOB], "sacct": [refused, (0, "|allocation|root|gpu01\n", "")]})
    found = _locate(runner, OutputPatterns("o-%x-%u-%j.txt"))
    assert (found.stdout, found.source) == ("/sub/o-train-ana-812.txt", "the job's options")


def test_with_no_record_anywhere_it_is_slurms_default_in_the_jobs_chdir_under_the_submit_dir() -> None:
    """Neither scontrol nor sacct know it: slurm-%j.out, in the job's relative --chdir under where submit ran."""
    runner = MockRunner.scripted({"scontrol": [UNKNOWN_JOB], "sacct": [(0, "", "")]})
    found = _locate(runner, OutputPatterns(chdir="run"))
    assert (found.stdout, found.stderr, found.source) == ("/sub/run/slurm-812.out",) * 2 + ("the job's options",)
    over_ssh = _locate(MockRunner.scripted({"scontrol": [UNKNOWN_JOB], "sacct": [(0, "", "")]}), workdir=None)
    assert over_ssh.stdout == "slurm-812.out"  # relative: the login's directory, where the remote read starts


def test_a_local_read_takes_the_bytes_after_the_offset_and_none_for_no_file(tmp_path: Path) -> None:
    """Here the file is opened: from the offset, at most the limit; a missing file is None, an unreadable one
    LogMissing naming it."""
    path = tmp_path / "out.txt"
    path.write_bytes(b"hello\n\xff world\n")
    runner = MockRunner(lambda r: Reply(0, "", "", 0.0))
    assert read_chunk(runner, str(path), 0) == b"hello\n\xff world\n"
    assert read_chunk(runner, str(path), 6, limit=3) == b"\xff w"
    assert read_chunk(runner, str(tmp_path / "none"), 0) is None
    assert runner.argvs == []  # no command ran
    with pytest.raises(LogMissing, match=r"cannot read"):
        read_chunk(runner, str(tmp_path), 0)


def _far_side(request: Request) -> Reply:
    """What ssh's far side does with a request: the one command line remote_command makes, run by a real sh."""
    line = remote_command(request.argv, request.env, request.drop_env_prefixes, request.keep_env)
    done = subprocess.run(["sh", "-c", line], capture_output=True, timeout=10, check=False)
    return Reply(done.returncode, done.stdout.decode(), done.stderr.decode(), 0.0)


@pytest.mark.parametrize(
    "name",
    ["plain.out", "it's $(touch pwned) `id`.out", "two\nlines;rm -rf x.out", "-starts-with-dash", "résumé %j.out"],
    ids=["plain", "quotes-and-substitutions", "newline-semicolon", "dash", "non-ascii"],
)
def test_a_remote_read_passes_the_path_as_one_word_through_a_real_shell(tmp_path: Path, name: str) -> None:
    """Over ssh the path is an argument of a fixed program (never shell text): a hostile name reads its own bytes,
    from the offset, in chunks, non-UTF-8 bytes intact; nothing it names runs."""
    path = tmp_path / name
    content = bytes(range(256)) * 3
    path.write_bytes(content)
    runner = MockRunner(_far_side, remote=True)
    assert read_chunk(runner, str(path), 0) == content
    assert read_chunk(runner, str(path), 700, limit=50) == content[700:750]
    assert read_chunk(runner, str(path), len(content)) == b""
    assert not (tmp_path / "pwned").exists()
    assert runner.argvs[0][:2] == ("sh", "-c")
    assert runner.argvs[0][-1] == str(path)


def test_a_remote_file_missing_is_none_and_unreadable_is_logmissing(tmp_path: Path) -> None:
    """The far side's exit 66 (no such file) is None; 77 (not readable) a LogMissing naming path and host."""
    runner = MockRunner(_far_side, remote=True)
    assert read_chunk(runner, str(tmp_path / "nope.out"), 0) is None
    refused = MockRunner(lambda r: Reply(77, "", "", 0.0), remote=True)
    with pytest.raises(LogMissing, match=r"/x\.out is not readable in a MockTransport"):
        read_chunk(refused, "/x.out", 0)
