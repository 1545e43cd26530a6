"""The environment the background driver runs SLURM's commands with, so that it is never a trap.

A driver is started by whichever command finds work and no driver, and inherits that shell's PATH; a shell without
`module load slurm` would leave it unable to run sbatch for as long as it lives. So:

- a command offers its own environment (``offer_env``, with the driver config every submit journals, and before a
  cancel): it replaces the journaled one only if it finds the commands the journaled one does not (a later shell
  that lacks them never breaks a working driver);
- the driver asks each turn whether its own environment finds the commands (``Health.refresh``); when it does not
  and the journaled one does, it takes that one and journals the replacement (``DRIVER_ENV_REPLACED``); while
  neither does, it journals which command it cannot run and its PATH (``DRIVER_ENV_PROBLEM``), which
  ``driver status`` and ``status`` say in one line (``env_problem_line``).

Only the names (PATH, SLURM_CONF) and where a command was looked for are journaled: nothing secret.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping

import attrs

from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.lanes.slurm.world import SLURM_COMMANDS

__all__ = [
    "DRIVER_ENV_PROBLEM",
    "DRIVER_ENV_REPLACED",
    "HEALTHY_SECONDS",
    "Health",
    "env_problem_line",
    "judged_problem",
    "missing_command",
    "offered_env",
]

log = logging.getLogger(__name__)

DRIVER_ENV_PROBLEM = "driver-env-problem"
"""The journal's meta key of what the running driver cannot run: {pid, command, path, at}; absent when it can."""
HEALTHY_SECONDS = 60.0
"""How long a PATH that held every command is trusted before the driver looks again."""
DRIVER_ENV_REPLACED = "driver-env-replaced"
"""The journal's meta key of the last time a driver took a command's environment in place of its own."""


def missing_command(lanes: Iterable[SlurmSettings], env: Mapping[str, str]) -> str | None:
    """The first program ``lanes`` need that ``env``'s PATH does not find (SLURM's commands for a cluster reached
    from here, ssh for one reached over ssh), or None when every one is found."""
    path = env.get("PATH", "")
    needed: list[str] = []
    for lane in lanes:
        needed.extend(("ssh",) if lane.host is not None else SLURM_COMMANDS)
    return next((name for name in dict.fromkeys(needed) if shutil.which(name, path=path) is None), None)


def offered_env(
    lanes: Iterable[SlurmSettings], journaled: Mapping[str, str] | None, own: Mapping[str, str], keys: Iterable[str]
) -> dict[str, str]:
    """The environment to journal for the driver: ``own`` (the offering command's ``keys``), unless it misses a
    command that the ``journaled`` one finds (a working driver environment is never replaced by a broken one)."""
    lanes = tuple(lanes)
    mine = {k: own[k] for k in keys if k in own}
    if journaled is None or missing_command(lanes, mine) is None:
        return mine
    if missing_command(lanes, journaled) is None:
        return dict(journaled)
    return mine


@attrs.define
class Health:
    """The running driver's view of its own environment (a mutable record: it remembers what it journaled last, so
    a healthy turn costs a PATH lookup and no journal write)."""

    lanes: tuple[SlurmSettings, ...]
    """The SLURM lanes it runs commands for (an empty tuple: a port with no commands, e.g. a fake)."""
    inherited: Mapping[str, str] = attrs.field(factory=dict)
    """The environment of the command that started this driver (only its PATH is ever taken: SLURM_CONF, which
    names the cluster, is the journal's)."""
    env: MutableMapping[str, str] = attrs.field(factory=lambda: os.environ)
    said: tuple[str, str] | None = None
    """The command whose absence is journaled now, and the PATH of the offer it was judged with (None: nothing)."""
    healthy: tuple[str, float] | None = None
    """The PATH last found to hold every command, and when (monotonic): looked at again only after
    ``HEALTHY_SECONDS`` (six PATH lookups cost about a millisecond on a long PATH)."""

    def refresh(self, journal: Journal, journaled: Callable[[], Mapping[str, str] | None]) -> str | None:
        """Look once: when this process's PATH misses a command and the last command's offer (``journaled()``,
        read only then), else the PATH of the command that started it, finds them all, take it (journaled:
        ``DRIVER_ENV_REPLACED``); journal what is still missing, or that nothing is. Returns the missing command,
        or None."""
        if not self.lanes:
            return None
        path, now = self.env.get("PATH", ""), time.monotonic()
        if self.healthy is not None and self.healthy[0] == path and now - self.healthy[1] < HEALTHY_SECONDS:
            return None
        missing = missing_command(self.lanes, self.env)
        self.healthy = (path, now) if missing is None else None
        offered: dict[str, str] = {}
        if missing is not None:
            offered = dict(journaled() or {})
            offers = [(offered, "a later command")]
            if "PATH" in self.inherited:
                offers.append(({"PATH": self.inherited["PATH"]}, "the command that started the driver"))
            for offer, whose in offers:
                if offer and missing_command(self.lanes, {**self.env, **offer}) is None:
                    self._take(journal, offer, missing, whose)
                    missing = None
                    break
        said = None if missing is None else (missing, offered.get("PATH", ""))
        if said != self.said:
            if missing is None:
                journal.drop_meta(DRIVER_ENV_PROBLEM)
            else:
                path = self.env.get("PATH", "")
                problem = {"pid": os.getpid(), "command": missing, "path": path, "offer": offered.get("PATH", "")}
                journal.put_meta(DRIVER_ENV_PROBLEM, {**problem, "at": time.time()})
                log.error("cannot run %s: it is not on PATH=%s", missing, path)
            self.said = said
        return missing

    def _take(self, journal: Journal, offer: Mapping[str, str], missing: str, whose: str) -> None:
        before = self.env.get("PATH", "")
        self.env.update({str(k): str(v) for k, v in offer.items()})
        after = self.env.get("PATH", "")
        journal.put_meta(
            DRIVER_ENV_REPLACED,
            {"pid": os.getpid(), "at": time.time(), "missing": missing, "before": before, "path": after, "by": whose},
        )
        log.warning("could not run %s with PATH=%s; took the PATH of %s: %s", missing, before, whose, after)


def env_problem_line(journal: Journal, *, offer: str | None = None) -> str | None:
    """The one line ``driver status`` and ``status`` print when the journal's running driver cannot run a command
    SLURM needs, or None (no problem, or one journaled by a driver that is gone). With ``offer`` (the PATH a
    command just offered), only a problem the driver journaled after judging that offer."""
    problem = journal.get_meta(DRIVER_ENV_PROBLEM)
    if offer is not None and isinstance(problem, dict) and problem.get("offer") != offer:
        return None  # the driver has not looked at this command's offer yet
    owner = journal.owner() if problem else None
    if not isinstance(problem, dict) or owner is None or owner.pid != problem.get("pid") or not journal.driver_alive():
        return None
    command = problem.get("command", "?")
    return (
        f"the driver (pid {owner.pid}) cannot run {command}: it is not on its PATH={problem.get('path', '')}; a "
        f"`fellows-fsm submit` or `cancel` from a shell where `{command}` is found (after `module load slurm`, say) "
        "gives the driver that shell's PATH"
    )


def judged_problem(journal: Journal, config_key: str) -> str | None:
    """``env_problem_line`` of a driver that has judged the environment last offered (the journal's ``config_key``
    entry: the driver config, with its ``env``), or None: a command that just offered its own waits for that."""
    saved = journal.get_meta(config_key)
    env = saved.get("env") if isinstance(saved, dict) else None
    return env_problem_line(journal, offer=str(env.get("PATH", "")) if isinstance(env, dict) else "")
