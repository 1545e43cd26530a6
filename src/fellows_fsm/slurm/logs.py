"""Where a SLURM job's output file is, and its bytes read where the job ran: here, or over the lane's own ssh master.

Where: what slurmctld says while it knows the job (``scontrol show job``: StdOut, StdErr), else what accounting
says (``sacct``: StdOut/StdErr with ``--expand-patterns`` where the version has them, as 24.11 does; else its WorkDir,
JobName and User), else the job's own ``--output``/``--error``/``--chdir`` (its script's ``#SBATCH`` lines, journaled
at submit, and its sbatch options), expanded as sbatch does; with none, ``slurm-%j.out`` in its working directory.
A path is only ever an argv word: read here with ``open``, over ssh as one argument of a fixed ``sh`` program.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import attrs

from fellows_fsm.errors import FellowsError, LogMissing, UsageError
from fellows_fsm.scheduler.script import read_script_defaults
from fellows_fsm.slurm.runner import CommandRunner

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_OUTPUT",
    "JobFacts",
    "OutputFiles",
    "OutputPatterns",
    "expand_pattern",
    "locate",
    "output_settings",
    "parse_scontrol",
    "read_chunk",
]

DEFAULT_OUTPUT = "slurm-%j.out"
"""sbatch's file for a job that names none (stdout and stderr both)."""
CHUNK_BYTES = 4 * 1024 * 1024
"""The most one read takes (a remote read is one ssh round trip of this, base64-encoded)."""
NO_ARRAY_TASK = "4294967294"
"""What sbatch writes for ``%a`` in a job that is not an array (SLURM's NO_VAL)."""

_PATTERN = re.compile(r"%(\d*)([%AabjNnstux])")
_MISSING, _UNREADABLE = 66, 77
# The remote read: a fixed program; the offset, the limit and the path arrive as its positional arguments ("$1"...).
_READ = 'test -e "$3" || exit 66; test -r "$3" || exit 77; tail -c "+$1" -- "$3" | head -c "$2" | base64'


@attrs.frozen
class OutputPatterns:
    """What a job asked for: its ``--output``, ``--error`` and ``--chdir`` as written (None: it did not say)."""

    output: str | None = None
    error: str | None = None
    chdir: str | None = None

    @classmethod
    def of(cls, journaled: Mapping[str, object] | None, extra_args: Sequence[str]) -> OutputPatterns:
        """The script's lines (``journaled`` at submit: ``output_settings``), each overridden by the sbatch option
        of ``extra_args`` (the command line wins over ``#SBATCH``, as in sbatch)."""
        kept = {k: v for k, v in (journaled or {}).items() if isinstance(v, str)}
        return cls(
            output=_option(extra_args, "--output", "-o") or kept.get("output"),
            error=_option(extra_args, "--error", "-e") or kept.get("error"),
            chdir=_option(extra_args, "--chdir", "-D") or kept.get("chdir"),
        )


@attrs.frozen
class JobFacts:
    """What the expansion of a pattern needs of a job (accounting's word when it has one)."""

    job_id: str
    name: str
    user: str
    node: str = ""


@attrs.frozen
class OutputFiles:
    """The job's output and error files, and who said where they are (scontrol, sacct or the job's options)."""

    stdout: str
    stderr: str
    source: str


def _option(args: Sequence[str], long: str, short: str) -> str | None:
    """The last value of an sbatch option in ``args`` (``--output=F``, ``--output F``, ``-oF``, ``-o F``)."""
    found: str | None = None
    i = 0
    while i < len(args):
        word = args[i]
        if word in {long, short}:
            if i + 1 < len(args):
                found = args[i + 1]
                i += 1
        elif word.startswith(long + "="):
            found = word[len(long) + 1 :]
        elif word.startswith(short) and len(word) > len(short) and not word.startswith("--"):
            found = word[len(short) :]
        i += 1
    return found


def output_settings(script: Path) -> dict[str, str]:
    """The ``#SBATCH`` ``--output``, ``--error`` and ``--chdir`` of a script (those it gives), journaled with its
    dispatch: the script's copy goes once the dispatch is final, accounting may not keep them (22.05)."""
    try:
        found = read_script_defaults(script)
    except UsageError:
        return {}
    return {k: v for k in ("output", "error", "chdir") if (v := getattr(found, k)) is not None}


def expand_pattern(pattern: str, job: JobFacts) -> str:
    """``pattern`` as sbatch expands a file name: ``%j`` and ``%A`` the job id, ``%x`` its name, ``%u`` its user,
    ``%N`` its first node, ``%a`` the array task (none: 4294967294), ``%n``/``%t``/``%s`` 0, ``%%`` a ``%``; a
    number after ``%`` pads a number with zeros (``%5j``). Any other ``%`` stays as written."""

    def one(match: re.Match[str]) -> str:
        width, letter = match.group(1), match.group(2)
        if letter == "%":
            return "%"
        value = {
            "j": job.job_id,
            "A": job.job_id,
            "a": NO_ARRAY_TASK,
            "x": job.name,
            "u": job.user,
            "N": job.node,
            "n": "0",
            "t": "0",
            "s": "0",
        }[letter]
        return value.zfill(int(width)) if width and value.isdigit() else value

    return _PATTERN.sub(one, pattern)


def parse_scontrol(text: str) -> dict[str, str]:
    """``StdOut``, ``StdErr``, ``WorkDir`` of ``scontrol show job -o``'s line (a value runs to the next `` Key=``)."""
    fields: dict[str, str] = {}
    for key in ("StdOut", "StdErr", "WorkDir"):
        match = re.search(rf"(?:^| ){key}=(.*?)(?= [A-Za-z][A-Za-z:/_]*=|\n|$)", text)
        if match and match.group(1) and match.group(1) != "(null)":
            # 22.05 shows a '%%' of the pattern as written (the file has '%'); 24.11 shows '%'.
            fields[key] = match.group(1).replace("%%", "%")
    return fields


def _in(workdir: str | None, path: str) -> str:
    return path if workdir is None or path.startswith("/") else f"{workdir.rstrip('/')}/{path}"


def locate(
    runner: CommandRunner,
    job_id: str,
    patterns: OutputPatterns,
    *,
    name: str,
    user: Callable[[], str],
    workdir: str | None,
) -> OutputFiles:
    """Where job ``job_id``'s output and error files are: scontrol while slurmctld knows it, else sacct, else the
    job's own options (``patterns``) with ``workdir`` (where the submit ran here; None over ssh: the login's
    directory) and ``name``/``user`` for the expansion. At most one scontrol and two sacct calls."""
    shown = runner.run(("scontrol", "show", "job", "-o", job_id))
    if shown.ok:
        fields = parse_scontrol(shown.stdout)
        if "StdOut" in fields:
            return OutputFiles(fields["StdOut"], fields.get("StdErr") or fields["StdOut"], "scontrol")
    head = ("sacct", "-X", "-n", "-P", "-j", job_id)
    record = runner.run((*head, "--expand-patterns", "-o", "WorkDir,JobName,User,NodeList,StdOut,StdErr"))
    if not record.ok:  # 22.05: no StdOut field, no --expand-patterns
        record = runner.run((*head, "-o", "WorkDir,JobName,User,NodeList"))
    lines = [line for line in record.stdout.splitlines() if line.strip()] if record.ok else []
    values = lines[-1].split("|") if lines else []  # a requeued job: its latest record
    if values and not values[0]:
        # slurmdbd's first record of a job may lack its details (22.05: JobName "allocation", no WorkDir) for a few
        # seconds, even after its end: none of it is believed, so no wrong name is expanded into a path
        values = []
    if len(values) >= 6 and values[4]:
        return OutputFiles(values[4], values[5] or values[4], "sacct")
    known_dir = values[0] if values and values[0] else None
    node = values[3].split(",")[0].split("[")[0] if len(values) > 3 and values[3] not in ("", "None assigned") else ""
    job = JobFacts(job_id, values[1] if len(values) > 1 and values[1] else name, _user(values, user), node)
    base = known_dir or (_in(workdir, patterns.chdir) if patterns.chdir else workdir)
    stdout = _in(base, expand_pattern(patterns.output or DEFAULT_OUTPUT, job))
    stderr = _in(base, expand_pattern(patterns.error, job)) if patterns.error else stdout
    return OutputFiles(stdout, stderr, "sacct" if known_dir else "the job's options")


def _user(values: Sequence[str], user: Callable[[], str]) -> str:
    if len(values) > 2 and values[2]:
        return values[2]
    try:
        return user()
    except FellowsError:
        return "%u"


def read_chunk(runner: CommandRunner, path: str, offset: int, limit: int = CHUNK_BYTES) -> bytes | None:
    """Up to ``limit`` bytes of file ``path`` from byte ``offset`` where the runner's commands run: here with
    ``open``; over ssh through the lane's master (``tail -c +N -- PATH | head -c LIMIT | base64``, the path one
    argument, never shell text). None when the file does not exist (yet); LogMissing when it cannot be read."""
    transport = runner.transport
    if not transport.remote:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(limit)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LogMissing(f"cannot read {path} here: {exc.strerror}") from None
    done = runner.run(("sh", "-c", _READ, "sh", str(offset + 1), str(limit), path))
    if done.returncode == _MISSING:
        return None
    if done.returncode == _UNREADABLE:
        raise LogMissing(f"{path} is not readable {transport.where}")
    if not done.ok:
        raise LogMissing(f"cannot read {shlex.quote(path)} {transport.where}: {done.message}")
    try:
        return base64.b64decode(done.stdout)
    except (binascii.Error, ValueError):
        raise LogMissing(f"reading {path} {transport.where} gave no base64 ({done.message})") from None
