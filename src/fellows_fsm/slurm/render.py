"""Render a JobSpec as the sbatch argv that queues it on one rung: QoS, dispatch token, controller deadline.

It only builds argv lists and user-facing notes: it never runs a command, never builds a shell string, and
never rewrites the user's script or ``extra_args``.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Mapping
from pathlib import Path

import attrs

from fellows_fsm.scheduler.fields import parse_duration
from fellows_fsm.scheduler.options import SHORT_FLAGS, long_options
from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "DEFAULT_GRES",
    "LANE_SET",
    "LaneOptions",
    "SbatchCommand",
    "format_deadline",
    "format_time_limit",
    "render_sbatch",
    "script_options",
    "script_qos",
]

# sbatch reads #SBATCH lines only up to the first line that is neither a comment nor blank.
_SBATCH_LINE = re.compile(r"^#SBATCH\s+(?P<args>.*)$")
LANE_SET = ("--job-name", "--qos", "--comment", "--gres", "--gpus", "--time", "--partition", "--account")
"""The options a rung's sbatch line may set over a script's ``#SBATCH`` line for them (``script_options``), and
over a user's own ``--partition``/``--account`` after ``--``: sbatch takes the command line's (its last) value."""
_LANE_SET_SHORT = {"J": "--job-name", "q": "--qos", "G": "--gpus", "t": "--time", "p": "--partition", "A": "--account"}
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


def format_deadline(epoch_seconds: float, now: float) -> str:
    """An sbatch ``--deadline`` value relative to ``now`` (``now+N``, seconds rounded up, at least 1): sbatch
    reads a wall time in the zone it runs in, which may not be ours (a login host over ssh), so none is sent."""
    return f"now+{max(1, math.ceil(epoch_seconds - now))}"


def _set_options(words: list[str]) -> dict[str, str]:
    """The ``LANE_SET`` options that ``words`` (sbatch arguments) set, by long name, as written (the last wins).

    A long option may be abbreviated as sbatch allows (``--part=x``) and short ones clustered (``-vq low``)."""
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        word, following = words[i], words[i + 1] if i + 1 < len(words) else None
        i += 1
        if word.startswith("--"):
            name, equals, value = word.partition("=")
            meant = long_options(name)
            if len(meant) == 1 and meant[0] in LANE_SET:
                if not equals and following is not None:
                    value, i = following, i + 1
                found[meant[0]] = value
        elif word.startswith("-") and len(word) > 1:
            for j, letter in enumerate(word[1:], 1):
                if letter in SHORT_FLAGS:
                    continue
                if letter in _LANE_SET_SHORT:
                    value = word[j + 1 :]
                    if not value and following is not None:
                        value, i = following, i + 1
                    found[_LANE_SET_SHORT[letter]] = value
                break  # this letter takes a value: the rest of the word is that value
    return found


def script_options(script: str) -> dict[str, str]:
    """The ``LANE_SET`` options the script's ``#SBATCH`` lines set, by long name, as written (the last wins).

    Read as sbatch reads them: up to the first line that is neither blank nor a comment. An unreadable script
    yields none: sbatch itself will report it when the job is submitted.
    """
    try:
        with Path(script).open("rb") as handle:
            head = handle.read(_SCRIPT_PEEK_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for number, line in enumerate(head.splitlines()):
        stripped = line.strip()
        if number == 0 and stripped.startswith("#!"):
            continue
        if stripped and not stripped.startswith("#"):
            break
        match = _SBATCH_LINE.match(stripped)
        if match is None:
            continue
        try:
            words = shlex.split(match["args"], comments=True)
        except ValueError:
            words = match["args"].split("#", 1)[0].split()
        found.update(_set_options(words))
    return found


def script_qos(script: str) -> str | None:
    """The QoS an ``#SBATCH --qos``/``-q`` line in the script asks for (the last one wins), or None."""
    return script_options(script).get("--qos")


DEFAULT_GRES = "gpu:{gpus}"
"""How a GPU request is written when a lane says nothing: ``--gres=gpu:<count>``."""


@attrs.frozen
class LaneOptions:
    """What a SLURM lane sets on every sbatch besides the rung's QoS: its partition and account (None: not set),
    and how it writes a GPU request (a ``--gres`` template, or a ``--gpus-per-node`` one), each with ``{gpus}``;
    ``lane`` is its name, for the notes."""

    partition: str | None = None
    account: str | None = None
    gres: str = DEFAULT_GRES
    gpus_per_node: str | None = None
    lane: str = "fellows"

    def gpu_request(self, gpus: int) -> str | None:
        """The option that asks for ``gpus`` GPUs on this lane's cluster, e.g. ``--gres=gpu:a100:4``; None for 0."""
        if gpus <= 0:
            return None
        if self.gpus_per_node is not None:
            return f"--gpus-per-node={self.gpus_per_node.replace('{gpus}', str(gpus))}"
        return f"--gres={self.gres.replace('{gpus}', str(gpus))}"

    def gpu_options(self, gpus: int, script: Mapping[str, str]) -> tuple[str, ...]:
        """The GPU options of the sbatch line: the lane's request, after what cancels a GPU line of the script
        (``script``: ``script_options``) that the request, written another way, would not override.

        sbatch joins ``--gres``, ``--gpus`` and ``--gpus-per-node`` into one request, and a script's count in
        another option wins or adds nodes (measured on 22.05: ``--gpus-per-node=4`` with a script's
        ``--gres=gpu:8`` is a job of 8 GPUs; ``--gres=gpu:4`` with a script's ``--gpus=8`` one of 8 GPUs on 2
        nodes): so a script's ``--gpus`` is set to 0, and its ``--gres`` keeps only what is not a GPU."""
        request = self.gpu_request(gpus)
        if request is None:
            return ()  # a job of no GPUs asks for none here: the script's own lines are left as they are
        out: list[str] = []
        gres = script.get("--gres")
        if gres is not None and not request.startswith("--gres="):
            out.append(f"--gres={_without_gpus(gres)}")
        if "--gpus" in script:
            out.append("--gpus=0")
        return (*out, request)

    def placed(self) -> tuple[str, ...]:
        """The lane's partition and account options: after the job's own options, so they win over them and over
        the script's ``#SBATCH`` lines (sbatch takes the command line's last)."""
        out = () if self.partition is None else (f"--partition={self.partition}",)
        return out if self.account is None else (*out, f"--account={self.account}")


_NO_OPTIONS = LaneOptions()
_WHY = {
    "--job-name": "the dispatch's job name",
    "--qos": "this rung of the ladder",
    "--comment": "the dispatch token, which finds the job again after a lost reply",
    "--time": "the time limit fellows-fsm checks against each rung's MaxWall",
}


def _same(option: str, theirs: str, ours: str) -> bool:
    """Do the script's and the command line's values of ``option`` ask for the same thing (``--time`` is a
    duration, written in several ways)?"""
    if option == "--time":
        try:
            return parse_duration(theirs) == parse_duration(ours)
        except ValueError:
            return False
    return theirs == ours


def _without_gpus(gres: str) -> str:
    """A ``--gres`` value without its GPU items (``none`` when nothing else is left)."""
    kept = [item for item in gres.split(",") if item.strip() and item.strip().split(":")[0] not in ("gpu", "gres/gpu")]
    return ",".join(kept) or "none"


def _gpu_note(spec: JobSpec, option: str, theirs: str, lane: LaneOptions) -> str | None:
    """The note for a script's ``#SBATCH --gres``/``--gpus`` line that this sbatch overrides, or None when the
    line asks for what the lane's request does."""
    request = lane.gpu_request(spec.gpus)
    if request is None or request == f"--gres={theirs}" or (option == "--gpus" and theirs == str(spec.gpus)):
        return None
    return (
        f"{spec.script}: its '#SBATCH {option}={theirs}' line is overridden by the command line's {request} "
        f"(the GPU request fellows-fsm counts, as lane {lane.lane} writes it); remove the line to silence this note"
    )


def _lane_notes(
    spec: JobSpec, in_script: Mapping[str, str], set_here: Mapping[str, str], lane: LaneOptions
) -> list[str]:
    """Notes for the user: each ``#SBATCH`` line of the script (``in_script``: ``script_options``), and each
    ``--partition``/``--account`` of its own after ``--``, that this sbatch's command line (``set_here``)
    overrides, only where the value differs."""
    notes: list[str] = []
    for option, theirs in in_script.items():
        if option in ("--gres", "--gpus"):
            note = _gpu_note(spec, option, theirs, lane)
            notes.extend(() if note is None else (note,))
            continue
        # A partition or account is the lane's to override; a user's own after -- wins over the script as in sbatch.
        ours = {"--partition": lane.partition, "--account": lane.account}.get(option, set_here.get(option))
        if ours is None or _same(option, theirs, ours):
            continue
        table = "[fellows]" if lane.lane == "fellows" else f"[lanes.{lane.lane}]"
        why = _WHY.get(option) or f"lane {lane.lane}'s {option[2:]}: {table} {option[2:]}"
        notes.append(
            f"{spec.script}: its '#SBATCH {option}={theirs}' line is overridden by the command line's "
            f"{option}={ours} ({why}); remove the line to silence this note"
        )
    for option, theirs in _set_options(list(spec.extra_args)).items():
        ours = set_here.get(option)
        if option in ("--partition", "--account") and ours is not None and theirs != ours:
            notes.append(
                f"your {option}={theirs} (after --) is overridden on lane {lane.lane} by its {option[2:]} "
                f"{ours!r}; it still applies on lanes that set none"
            )
    return notes


def render_sbatch(
    spec: JobSpec,
    *,
    qos: str | None,
    token: str | None,
    deadline: float | None,
    now: float | None = None,
    lane: LaneOptions = _NO_OPTIONS,
) -> SbatchCommand:
    """The ``sbatch --parsable`` argv for ``spec``; the script path comes last, ``extra_args`` just before it
    (and after them the lane's partition and account, when it sets them: ``lane``).

    ``deadline`` (epoch seconds) is written relative to ``now`` (default: ``time.time()``, read at the call).

    With ``qos``, ``token`` and ``deadline`` all None this is the plain render of ``spec``. The options it sets
    (``LANE_SET``) override the script's ``#SBATCH`` lines for them (sbatch lets the command line win), and the
    lane's partition and account a user's own after ``--``: a note says so for each value overridden.
    """
    argv = ["sbatch", "--parsable", f"--job-name={spec.name}"]
    if qos is not None:
        argv.append(f"--qos={qos}")
    if token is not None:
        argv.append(f"--comment={token}")
    in_script = script_options(spec.script_file)
    argv.extend(lane.gpu_options(spec.gpus, in_script))
    if spec.time_limit_seconds is not None:
        argv.append(f"--time={format_time_limit(spec.time_limit_seconds)}")
    if deadline is not None:
        argv.append(f"--deadline={format_deadline(deadline, time.time() if now is None else now)}")
    argv.extend(spec.extra_args)
    argv.extend(lane.placed())
    if qos is None and token is None and deadline is None:
        # The plain render is no rung's: nothing is overridden for a rung, so nothing is noted.
        return SbatchCommand((*argv, spec.script_file))
    # What this line sets, the last of each option winning (the lane's partition and account come last).
    set_here = {k: v for k, _, v in (a.partition("=") for a in argv[2:]) if k.startswith("--")}
    return SbatchCommand((*argv, spec.script_file), tuple(_lane_notes(spec, in_script, set_here, lane)))
