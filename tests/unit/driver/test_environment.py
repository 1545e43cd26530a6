"""The driver's environment (driver/environment.py): which commands a PATH finds, which environment a command's offer
journals, and the driver's own look each turn (take a working PATH, journal what it cannot run), on real PATH
directories of executables."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm.driver.environment import (
    DRIVER_ENV_PROBLEM,
    DRIVER_ENV_REPLACED,
    Health,
    env_problem_line,
    missing_command,
    offered_env,
)
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.lanes.slurm.world import SLURM_COMMANDS

LOCAL = (SlurmSettings(),)


def _bin(tmp_path: Path, name: str, programs: tuple[str, ...]) -> str:
    """A directory holding an executable for each of ``programs``; its path."""
    folder = tmp_path / name
    folder.mkdir()
    for program in programs:
        path = folder / program
        path.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        path.chmod(0o755)
    return str(folder)


@pytest.fixture
def good(tmp_path: Path) -> str:
    return _bin(tmp_path, "good", SLURM_COMMANDS)


@pytest.fixture
def bad(tmp_path: Path) -> str:
    return _bin(tmp_path, "bad", tuple(c for c in SLURM_COMMANDS if c != "sbatch"))


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    opened = Journal(tmp_path / "state" / "journal.sqlite3")
    yield opened
    opened.close()


def test_missing_command_names_the_first_one_a_path_lacks(good: str, bad: str) -> None:
    """A PATH with every SLURM command finds them; one without sbatch names sbatch; over ssh only ssh is needed."""
    assert missing_command(LOCAL, {"PATH": good}) is None
    assert missing_command(LOCAL, {"PATH": bad}) == "sbatch"
    assert missing_command(LOCAL, {}) == "sbatch"
    remote = (SlurmSettings(host="login1"),)
    assert missing_command(remote, {"PATH": good}) == "ssh"
    assert missing_command(remote, {"PATH": f"{good}:{_bin(Path(good).parent, 'ssh', ('ssh',))}"}) is None


def test_an_offer_replaces_a_broken_environment_and_never_a_working_one(good: str, bad: str) -> None:
    """A command's environment is journaled unless it lacks a command the journaled one finds."""
    keys = ("PATH", "SLURM_CONF")
    assert offered_env(LOCAL, None, {"PATH": bad, "HOME": "/x"}, keys) == {"PATH": bad}
    assert offered_env(LOCAL, {"PATH": bad}, {"PATH": good}, keys) == {"PATH": good}
    assert offered_env(LOCAL, {"PATH": good, "SLURM_CONF": "/a"}, {"PATH": bad}, keys) == {
        "PATH": good,
        "SLURM_CONF": "/a",
    }
    assert offered_env(LOCAL, {"PATH": bad}, {"PATH": bad, "SLURM_CONF": "/b"}, keys) == {
        "PATH": bad,
        "SLURM_CONF": "/b",
    }


def test_a_driver_takes_a_later_commands_working_path_and_journals_it(journal: Journal, good: str, bad: str) -> None:
    """Its own PATH lacks sbatch, the journaled offer finds it: it takes that PATH, journals the replacement, and
    journals no problem."""
    env = {"PATH": bad}
    health = Health(LOCAL, env=env)
    assert health.refresh(journal, lambda: {"PATH": good}) is None
    assert env["PATH"] == good
    replaced = journal.get_meta(DRIVER_ENV_REPLACED)
    assert (replaced["missing"], replaced["before"], replaced["path"]) == ("sbatch", bad, good)
    assert replaced["by"] == "a later command"
    assert journal.get_meta(DRIVER_ENV_PROBLEM) is None


def test_a_driver_falls_back_to_the_path_of_the_command_that_started_it(journal: Journal, good: str, bad: str) -> None:
    """The journal's environment lacks sbatch (an old submit's) but the shell that started this driver finds it:
    that PATH is taken (only the PATH: SLURM_CONF stays the journal's)."""
    env = {"PATH": bad, "SLURM_CONF": "/journaled"}
    health = Health(LOCAL, inherited={"PATH": good, "SLURM_CONF": "/other"}, env=env)
    assert health.refresh(journal, lambda: {"PATH": bad}) is None
    assert env == {"PATH": good, "SLURM_CONF": "/journaled"}
    assert journal.get_meta(DRIVER_ENV_REPLACED)["by"] == "the command that started the driver"


def test_a_driver_that_cannot_run_sbatch_journals_it_once_and_clears_it(journal: Journal, good: str, bad: str) -> None:
    """No environment finds sbatch: the problem is journaled (command, PATH, the offer judged) and not rewritten
    on the next look; a new offer is judged and journaled; a working one clears it."""
    env = {"PATH": bad}
    health = Health(LOCAL, env=env)
    assert health.refresh(journal, lambda: {"PATH": bad}) == "sbatch"
    problem = journal.get_meta(DRIVER_ENV_PROBLEM)
    assert (problem["command"], problem["path"], problem["offer"], problem["pid"]) == ("sbatch", bad, bad, os.getpid())
    journal.put_meta(DRIVER_ENV_PROBLEM, {**problem, "marker": 1})
    assert health.refresh(journal, lambda: {"PATH": bad}) == "sbatch"
    assert journal.get_meta(DRIVER_ENV_PROBLEM)["marker"] == 1  # unchanged: not written again
    assert health.refresh(journal, lambda: {"PATH": "/nowhere"}) == "sbatch"
    assert journal.get_meta(DRIVER_ENV_PROBLEM)["offer"] == "/nowhere"
    assert health.refresh(journal, lambda: {"PATH": good}) is None
    assert journal.get_meta(DRIVER_ENV_PROBLEM) is None


def test_a_port_with_no_commands_is_never_judged(journal: Journal) -> None:
    """A driver on a fake (no SLURM lanes to run commands for) journals nothing whatever its PATH."""
    assert Health((), env={"PATH": ""}).refresh(journal, lambda: None) is None
    assert journal.get_meta(DRIVER_ENV_PROBLEM) is None


def test_the_problem_line_is_said_only_for_the_driver_holding_the_lock(journal: Journal, bad: str) -> None:
    """The line names the driver's pid, the command, its PATH and the fix, while that driver holds the lock; a
    problem of a driver that is gone is not said; nor one about an offer the driver has not judged yet."""
    Health(LOCAL, env={"PATH": bad}).refresh(journal, lambda: {"PATH": bad})
    assert env_problem_line(journal) is None  # no driver holds the lock
    journal.acquire_driver(kind="background", log=None, at=0.0)
    try:
        line = env_problem_line(journal)
        assert line is not None
        assert line.startswith(f"the driver (pid {os.getpid()}) cannot run sbatch: it is not on its PATH={bad}; ")
        assert "module load slurm" in line
        assert env_problem_line(journal, offer=bad) == line
        assert env_problem_line(journal, offer="/a/new/offer") is None
    finally:
        journal.release_driver()
