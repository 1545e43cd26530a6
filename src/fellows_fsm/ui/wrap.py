"""``submit --wrap "CMD"``, as sbatch has it: the command becomes a one-line ``sh`` script, written into the state dir
under a name of its content, and is then dispatched as any script (kept with its dispatch, walked the same way).

It never runs the command itself: the job runs it, as sbatch's own ``--wrap`` would.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from fellows_fsm.errors import UsageError

__all__ = ["WRAP_NAME", "wrap_script", "wrapped", "wrapped_args"]

WRAP_NAME = "wrap"
"""The job name of a wrapped command when none is given (sbatch's own)."""


def wrapped_args(
    script: Path | None, sbatch_args: tuple[str, ...], wrap: str | None
) -> tuple[Path | None, tuple[str, ...]]:
    """Where the positional arguments belong: without --wrap, as given; with it, there is no SCRIPT, so what click
    took for one is the first sbatch option after ``--``. UsageError (exit 2) for neither or both."""
    if wrap is None:
        if script is None:
            raise UsageError('submit needs a SCRIPT, or --wrap "CMD" to run a command as the job')
        return script, sbatch_args
    if not wrap.strip():
        raise UsageError("--wrap '' is empty; give the command the job runs, e.g. --wrap \"python train.py\"")
    if script is not None and not str(script).startswith("-"):
        raise UsageError(f"give either SCRIPT ({script}) or --wrap, not both; options after -- go to sbatch")
    return None, ((str(script), *sbatch_args) if script is not None else sbatch_args)


def wrap_script(command: str, state_dir: Path) -> Path:
    """The ``sh`` script that runs ``command`` (``#!/bin/sh`` and the command, as sbatch --wrap writes it), in
    ``state_dir/wrap/``, named by its content so the same command is one file."""
    if "\0" in command:
        raise UsageError("--wrap has a NUL byte; give the command as plain text")
    text = f"#!/bin/sh\n# fellows-fsm submit --wrap\n{command}\n"
    folder = state_dir / "wrap"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.sh"
    if not path.exists():
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o700)
        tmp.replace(path)
    return path


def wrapped(
    script: Path | None,
    sbatch_args: tuple[str, ...],
    wrap: str | None,
    name: str | None,
    state_dir: Callable[[], Path],
) -> tuple[Path, tuple[str, ...], str | None]:
    """``submit``'s script, sbatch options and job name: as given, or with --wrap its one-line script (in
    ``state_dir()``) and the name ``wrap`` unless --name gives one."""
    script, sbatch_args = wrapped_args(script, sbatch_args, wrap)
    if script is not None:
        return script, sbatch_args, name
    return wrap_script(str(wrap), state_dir()), sbatch_args, name or WRAP_NAME
