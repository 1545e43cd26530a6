"""What an sbatch script's ``#SBATCH`` lines ask for: the one reader (GPUs, wall time, job name, working dir), as
sbatch reads them (up to the first line that is neither blank nor a comment; the last value wins), and the one check
of a job (``check_spec``). The command line and ``JobSpec.from_script`` (port.py) both read a script here. It
imports no port (a job is what ``Job`` says it has) and no CLI: the port's values stand on it, not the reverse."""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import attrs

from fellows_fsm.errors import UsageError
from fellows_fsm.scheduler.fields import parse_duration
from fellows_fsm.scheduler.options import owned_option

__all__ = [
    "Job",
    "ScriptDefaults",
    "check_job_name",
    "check_script",
    "check_spec",
    "read_script_defaults",
    "spec_from_script",
    "time_seconds",
]


class Job(Protocol):
    """What the check reads of a job (the port's ``JobSpec`` has it): each value as given, checked here."""

    @property
    def name(self) -> object: ...
    @property
    def script(self) -> object: ...
    @property
    def gpus(self) -> object: ...
    @property
    def time_limit_seconds(self) -> object: ...
    @property
    def extra_args(self) -> Sequence[object]: ...


J = TypeVar("J", bound=Job)


@attrs.frozen
class ScriptDefaults:
    """What an sbatch script's ``#SBATCH`` lines ask for (None when it does not say)."""

    gpus: int | None = None
    time_limit_seconds: int | None = None
    name: str | None = None
    chdir: str | None = None
    """The job's working directory (``--chdir``/``-D``), as written."""
    output: str | None = None
    """The job's output file (``--output``/``-o``), as written (its patterns unexpanded)."""
    error: str | None = None
    """The job's error file (``--error``/``-e``), as written."""


_OPTION_NAMES = {"--gres": "gres", "--gpus": "gpus", "-G": "gpus", "--time": "time", "-t": "time"}
_OPTION_NAMES |= {"--job-name": "name", "-J": "name", "--chdir": "chdir", "-D": "chdir"}
_OPTION_NAMES |= {"--output": "output", "-o": "output", "--error": "error", "-e": "error"}


def time_seconds(text: str, where: str) -> int | None:
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise UsageError(
            f"{where}: {text!r} is not a SLURM time; use MM, HH:MM:SS or D-HH:MM:SS (e.g. 1:00:00)"
        ) from None
    if seconds is not None and seconds <= 0:
        raise UsageError(f"{where}: {text!r} must be longer than zero")
    return seconds


def _gres_gpus(gres: str, where: str) -> int | None:
    """The GPU count of a ``--gres`` value (``gpu``, ``gpu:8``, ``gpu:a100:8``), None when it asks for no GPU.

    A count that is not a number (``gpu:abc``, or a type without a count) is refused rather than read as 0.
    """
    for item in gres.split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 1:
            return 1
        count = parts[-1].split("(")[0]
        if len(parts) > 3 or not count.isdigit():
            raise UsageError(
                f"{where}: --gres={gres!r} has no GPU count fellows-fsm can read; give it as gpu:N or gpu:TYPE:N, "
                "e.g. --gres=gpu:8"
            )
        return int(count)
    return None


def check_script(script: Path) -> None:
    """Refuse, in one line naming it, a script that is missing, a directory, not a regular file (a FIFO would
    block the reader forever) or unreadable; it is looked at with stat, never opened, before this passes."""
    try:
        mode = os.stat(script).st_mode
    except FileNotFoundError:
        raise UsageError(f"script {str(script)!r} does not exist; give the path of an sbatch script") from None
    except OSError as exc:
        raise UsageError(f"script {str(script)!r} cannot be read ({exc.strerror}); give an sbatch script") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"script {str(script)!r} is a directory; give the path of an sbatch script in it")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise UsageError(f"script {str(script)!r} is {kind}, not a regular file; give an sbatch script file")
    if not os.access(script, os.R_OK):
        raise UsageError(f"script {str(script)!r} is not readable by this user; fix its permissions")


def check_job_name(name: object, where: str = "job name") -> str:
    """Refuse a job name that is not text, or has a control character (a newline would split SLURM's and our
    tables' rows)."""
    if not isinstance(name, str):
        raise UsageError(f"{where} {name!r} is not text; give a job name, e.g. 'train'")
    for char in name:
        if ord(char) < 0x20 or ord(char) == 0x7F:
            raise UsageError(
                f"{where} {name!r} has a control character ({char!r}); give a job name on one line, "
                "e.g. letters, digits, '-', '_' or '.'"
            )
    if not name.strip():
        raise UsageError(f"{where} {name!r} is empty; give a job name, e.g. 'train'")
    return name


def read_script_defaults(script: Path) -> ScriptDefaults:
    """Read ``--gres=gpu:N`` (or ``--gpus``), ``--time``, ``--job-name``, ``--chdir``, ``--output`` and ``--error``
    from the #SBATCH lines.

    Like sbatch, it stops at the first line that is neither blank nor a comment; the last value wins. The
    script is checked first (``check_script``): a missing, directory or non-regular one is refused unopened.
    """
    check_script(script)
    found: dict[str, str] = {}
    try:
        lines = script.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise UsageError(f"script {str(script)!r} cannot be read ({exc.strerror}); give an sbatch script") from None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        try:
            words = shlex.split(stripped.removeprefix("#SBATCH"), comments=True)
        except ValueError:
            continue
        if (owned := owned_option(words, in_script=True)) is not None:
            raise UsageError(
                f"{script.name}:{number}: '#SBATCH {owned[0]}' is refused by fellows-fsm: {owned[1]}; "
                "remove the line (`fellows-fsm submit --help` names these options)"
            )
        i = 0
        while i < len(words):
            word = words[i]
            option, _, value = word.partition("=") if word.startswith("--") else (word[:2], "", word[2:])
            key = _OPTION_NAMES.get(option)
            if key is not None:
                if not value and i + 1 < len(words):
                    i += 1
                    value = words[i]
                found[key] = value
                found[f"{key}@"] = f"{script.name}:{number}"
            i += 1
    gpus: int | None = None
    if "gres" in found:
        gpus = _gres_gpus(found["gres"], found["gres@"])
    if "gpus" in found:
        count = found["gpus"].rsplit(":", 1)[-1]
        if not count.isdigit():
            raise UsageError(f"{found['gpus@']}: --gpus={found['gpus']!r} is not a GPU count; give e.g. --gpus=8")
        gpus = int(count)
    limit = time_seconds(found["time"], f"{found['time@']} --time") if "time" in found else None
    if "name" in found:
        check_job_name(found["name"], f"{found['name@']}: #SBATCH --job-name")
    return ScriptDefaults(
        gpus=gpus,
        time_limit_seconds=limit,
        name=found.get("name"),
        chdir=found.get("chdir"),
        output=found.get("output"),
        error=found.get("error"),
    )


def check_spec(spec: J) -> J:
    """Refuse, in one line naming the value and what to give instead (UsageError, exit 2), a job fellows-fsm will
    not dispatch; return it unchanged. The one check of a job the command line and the Python API share
    (``Fellows.check`` and ``Fellows.submit`` make it before anything is journaled or queued).

    Its name (text, one line), its GPUs (a whole number, 0 or more), its time limit (whole seconds above zero, or
    None), every sbatch argument of ``extra_args`` (text; none that fellows-fsm sets or relies on: ``owned_option``)
    and its script (a readable regular file whose ``#SBATCH`` lines ask for nothing refused: ``read_script_defaults``).
    """
    check_job_name(spec.name)
    gpus = spec.gpus
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise UsageError(
            f"gpus {gpus!r} is not a GPU count; give a whole number, 0 or more (--gpus 8; JobSpec(gpus=8) in Python)"
        )
    limit = spec.time_limit_seconds
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0):
        raise UsageError(
            f"time limit {limit!r} is not a wall time; give whole seconds above zero, or None for the partition's "
            "default (--time 1:00:00; JobSpec(time_limit_seconds=3600) in Python)"
        )
    args: list[str] = []
    for arg in spec.extra_args:
        if not isinstance(arg, str):
            raise UsageError(f"sbatch argument {arg!r} is not text; give every sbatch argument as a str")
        args.append(arg)
    if (owned := owned_option(args)) is not None:
        raise UsageError(
            f"sbatch option {owned[0]!r} (after `--`, or in JobSpec.extra_args) is set by fellows-fsm itself: "
            f"{owned[1]}"
        )
    if not isinstance(spec.script, str):
        raise UsageError(f"script {spec.script!r} is not a path as text; give it as a str, e.g. str(path)")
    read_script_defaults(Path(spec.script))
    return spec


def spec_from_script(
    make: Callable[..., J],
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    gpus: int | None = None,
    time_limit_seconds: int | None = None,
    extra_args: Sequence[str] = (),
) -> J:
    """``JobSpec.from_script`` (``make`` is JobSpec): the script's ``#SBATCH`` GPUs, time and name (else its stem),
    each given argument winning, the script made absolute; checked (``check_spec``) as a submit checks it."""
    script = Path(path)
    found = read_script_defaults(script)
    spec = make(
        name=name if name is not None else found.name or script.stem,
        script=str(script.resolve()),
        gpus=gpus if gpus is not None else found.gpus or 0,
        time_limit_seconds=time_limit_seconds if time_limit_seconds is not None else found.time_limit_seconds,
        extra_args=tuple(extra_args),
    )
    return check_spec(spec)
