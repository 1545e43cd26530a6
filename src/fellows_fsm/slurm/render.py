"""Render a JobSpec as the sbatch argv that queues it on one rung: QoS, dispatch token, controller deadline.

It only builds argv lists and user-facing notes: it never runs a command, never builds a shell string, and
never rewrites the user's script or ``extra_args``.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import attrs

from fellows_fsm.scheduler import JobSpec

OWNED_OPTIONS: dict[str, str] = {
    "--qos": "the ladder sets the QoS of every rung; change [fellows] qos/qos_ladder, or use --pin fellows",
    "--comment": "it carries the dispatch token that finds a job again after a lost reply",
    "--deadline": "it carries the rung's controller deadline ([router] controller_deadline)",
    "--job-name": "give the name with fellows-fsm submit --name",
    "--gres": "give the GPU count with fellows-fsm submit --gpus (or #SBATCH --gres=gpu:N in the script)",
    "--gpus": "give the GPU count with fellows-fsm submit --gpus (or #SBATCH --gres=gpu:N in the script)",
    "--time": "give the wall time with fellows-fsm submit --time (or #SBATCH --time in the script)",
    "--hold": "a held job never starts, so no rung could start it",
    "--parsable": "fellows-fsm already asks sbatch for its parsable output",
    "--test-only": "a test-only submit queues nothing for the ladder to follow",
    "--wrap": "fellows-fsm submits the script you give it",
    "--array": "a dispatch follows one job, not an array",
}
"""sbatch options fellows-fsm sets or relies on, refused after ``--``, with what to do instead."""
_OWNED_SHORT = {"q": "--qos", "J": "--job-name", "G": "--gpus", "t": "--time", "H": "--hold", "a": "--array"}
# sbatch's short options that take no value: after one of these, the next letter is another option.
_SHORT_FLAGS = frozenset("hHIkOQsuvVW")

__all__ = [
    "OWNED_OPTIONS",
    "SbatchCommand",
    "format_deadline",
    "format_time_limit",
    "owned_option",
    "render_sbatch",
    "script_qos",
]

# sbatch reads #SBATCH lines only up to the first line that is neither a comment nor blank.
_SBATCH_LINE = re.compile(r"^#SBATCH\s+(?P<args>.*)$")
_QOS_OPTION = re.compile(r"(?:^|\s)(?:--qos(?:=|\s+)|-q\s*)(?P<qos>[^\s#]+)")
_DAY = 86_400
_SCRIPT_PEEK_BYTES = 256 * 1024


@attrs.frozen
class SbatchCommand:
    """An sbatch argv, and notes for the user about how it relates to the script."""

    argv: tuple[str, ...]
    notes: tuple[str, ...] = ()


def format_time_limit(seconds: int) -> str:
    """An sbatch ``--time`` value: whole minutes under a day, else ``D-HH:MM:SS`` (seconds rounded up)."""
    if seconds <= 0:
        raise ValueError(f"time limit {seconds!r} s must be positive")
    if seconds < _DAY and seconds % 60 == 0:
        return str(seconds // 60)
    days, rest = divmod(seconds, _DAY)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def format_deadline(epoch_seconds: float) -> str:
    """An sbatch ``--deadline`` value in local time, ``YYYY-MM-DDTHH:MM:SS``, rounded up to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(math.ceil(epoch_seconds)))


def script_qos(script: str) -> str | None:
    """The QoS an ``#SBATCH --qos``/``-q`` line in the script asks for (the last one wins), or None.

    An unreadable script yields None: sbatch itself will report it when the job is submitted.
    """
    try:
        with Path(script).open("rb") as handle:
            head = handle.read(_SCRIPT_PEEK_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    found: str | None = None
    for number, line in enumerate(head.splitlines()):
        stripped = line.strip()
        if number == 0 and stripped.startswith("#!"):
            continue
        if stripped and not stripped.startswith("#"):
            break
        match = _SBATCH_LINE.match(stripped)
        if match is None:
            continue
        option = _QOS_OPTION.search(match["args"])
        if option is not None:
            found = option["qos"]
    return found


def render_sbatch(spec: JobSpec, *, qos: str | None, token: str | None, deadline: float | None) -> SbatchCommand:
    """The ``sbatch --parsable`` argv for ``spec``; the script path comes last, ``extra_args`` just before it.

    With ``qos``, ``token`` and ``deadline`` all None this is the plain render of ``spec``. A QoS given here
    overrides an ``#SBATCH --qos`` line in the script (sbatch lets the command line win): a note says so.
    """
    argv = ["sbatch", "--parsable", f"--job-name={spec.name}"]
    notes: list[str] = []
    if qos is not None:
        argv.append(f"--qos={qos}")
        in_script = script_qos(spec.script)
        if in_script is not None and in_script != qos:
            notes.append(
                f"{spec.script}: its '#SBATCH --qos={in_script}' line is overridden by the command line's "
                f"--qos={qos} (this rung of the ladder); remove the line to silence this note"
            )
    if token is not None:
        argv.append(f"--comment={token}")
    if spec.gpus > 0:
        argv.append(f"--gres=gpu:{spec.gpus}")
    if spec.time_limit_seconds is not None:
        argv.append(f"--time={format_time_limit(spec.time_limit_seconds)}")
    if deadline is not None:
        argv.append(f"--deadline={format_deadline(deadline)}")
    argv.extend(spec.extra_args)
    argv.append(spec.script)
    return SbatchCommand(tuple(argv), tuple(notes))


def owned_option(extra_args: tuple[str, ...] | list[str]) -> tuple[str, str] | None:
    """The first option in ``extra_args`` that fellows-fsm owns, as (the argument, why), or None.

    sbatch takes unambiguous prefixes of long options (``--qo=x`` is ``--qos=x``), so a prefix of an owned
    option of two letters or more counts too; short options may be clustered (``-vq low``).
    """
    for arg in extra_args:
        if arg.startswith("--") and len(arg) > 2:
            name = arg.split("=", 1)[0]
            for owned, why in OWNED_OPTIONS.items():
                if name == owned or (len(name) >= 4 and owned.startswith(name)):
                    return arg, why
        elif arg.startswith("-") and len(arg) > 1 and not arg.startswith("--"):
            for letter in arg[1:]:
                if letter in _OWNED_SHORT:
                    return arg, OWNED_OPTIONS[_OWNED_SHORT[letter]]
                if letter not in _SHORT_FLAGS:
                    break  # this letter takes a value: the rest of the word is that value
    return None
