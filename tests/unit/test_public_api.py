"""The package's public names: exactly the intended ones, each importable from fellows_fsm; the old paths that
still work (the console script, ``python -m fellows_fsm``, ``python -m fellows_fsm.daemon``, ``fellows_fsm.sim``); and
no module but a public face lists in ``__all__`` a name it does not define."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import fellows_fsm
import fellows_fsm.sim
from fellows_fsm.driver import process as driver_process
from fellows_fsm.ui import app as ui_app

SRC = Path(fellows_fsm.__file__).parent
ROOT = SRC.parents[1]

PUBLIC = {
    # the embedding API (docs/python-api.md)
    "Fellows",
    "Check",
    "Submitted",
    "Progress",
    "Handle",
    "HistoryEntry",
    "TickReport",
    "Config",
    "SlurmSettings",
    "FellowsConfig",
    "CommandSettings",
    "LaneConfig",
    "Ladder",
    "Rung",
    "load_config",
    "JobSpec",
    # the port, its values and its fake (for users' own tests)
    "Scheduler",
    "FakeScheduler",
    "Observation",
    "Phase",
    "ReasonGroup",
    "classify_reason",
    "Clock",
    "SystemClock",
    # the lifecycle core (sans I/O) and the driver that runs its effects
    "Dispatch",
    "Decision",
    "Executor",
    "Recorder",
    "Step",
    "CANCELLED",
    "FAILED_TO_GCP",
    "PARKED",
    "RUNNING",
    "WITHDRAWN",
    # the error tree
    "FellowsError",
    "UsageError",
    "ConfigError",
    "TransitionNotAllowed",
    "SchedulerError",
    "SchedulerUnreachable",
    "SshLoginRefused",
    "SubmitRejected",
    "QosRejected",
    "JournalError",
    "JournalBusy",
    "LaneError",
    "Interrupted",
}


def test_all_lists_exactly_the_public_names() -> None:
    """fellows_fsm.__all__ is the intended public surface, no more and no less, without duplicates."""
    assert len(fellows_fsm.__all__) == len(set(fellows_fsm.__all__))
    assert set(fellows_fsm.__all__) == PUBLIC


def test_the_kind_tables_old_names_are_the_same_classes() -> None:
    """Programs written before the kinds' tables were named for their kinds (issue 37) still import them."""
    assert fellows_fsm.FellowsConfig is fellows_fsm.SlurmSettings
    assert fellows_fsm.LaneConfig is fellows_fsm.CommandSettings


def test_all_is_sorted() -> None:
    """__all__ is kept sorted (constants first, as ruff sorts it), so a diff shows an added name plainly."""
    assert fellows_fsm.__all__ == sorted(fellows_fsm.__all__, key=lambda n: (not n.isupper(), n))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_is_importable(name: str) -> None:
    """``from fellows_fsm import <name>`` works for every public name, and it is not None."""
    module = importlib.import_module("fellows_fsm")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from fellows_fsm import {name}", namespace)  # the very statement a user writes
    assert namespace[name] is getattr(module, name)


# --------------------------------------------------------------------------- the old paths that still work
def _python(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run this checkout's package as ``python <args>`` in a fresh interpreter, in ``tmp_path``."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC.parent), "HOME": str(tmp_path)}
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=60
    )


def test_the_console_script_is_cli_main() -> None:
    """The ``fellows-fsm`` console script is ``fellows_fsm.cli:main`` (pyproject.toml and the installed entry point),
    and that name is the command group of ui/app.py."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"fellows-fsm": "fellows_fsm.cli:main"}
    (installed,) = entry_points(group="console_scripts", name="fellows-fsm")
    assert installed.value == "fellows_fsm.cli:main"
    assert installed.load() is ui_app.main
    assert importlib.import_module("fellows_fsm.cli").__all__ == ["main"]


def test_python_m_fellows_fsm_is_the_command_line(tmp_path: Path) -> None:
    """``python -m fellows_fsm --help`` shows the ``fellows-fsm`` group with its commands."""
    result = _python(tmp_path, "-m", "fellows_fsm", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: fellows-fsm ")
    for command in ("submit", "watch", "status", "history", "cancel", "driver"):
        assert f"  {command} " in result.stdout


def test_python_m_fellows_fsm_daemon_without_a_journal_is_the_drivers_usage(tmp_path: Path) -> None:
    """``python -m fellows_fsm.daemon`` with no journal (or two) reaches the driver's own main, which answers with its
    usage line and exit 2, starting nothing."""
    for args in ([], ["a.sqlite3", "b.sqlite3"]):
        result = _python(tmp_path, "-m", "fellows_fsm.daemon", *args)
        assert (result.returncode, result.stdout) == (2, "")
        assert result.stderr == "usage: python -m fellows_fsm.driver.process JOURNAL\n"
    assert list(tmp_path.iterdir()) == []


def test_python_m_fellows_fsm_daemon_starts_the_driver_on_the_journal_it_names(tmp_path: Path) -> None:
    """``python -m fellows_fsm.daemon JOURNAL`` forks off the driver of driver/process.py (the starter exits 0), which
    logs beside the journal that it cannot drive one that carries no driver config."""
    journal = tmp_path / "journal.sqlite3"
    result = _python(tmp_path, "-m", "fellows_fsm.daemon", str(journal))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    # run() returns once every holder of the stdout pipe closed it: the driver too, so its log is complete
    log = driver_process.log_path(journal).read_text(encoding="utf-8")
    assert "ERROR fellows_fsm.driver.process: driver " in log
    assert f"cannot drive {journal}: journal {journal} carries no driver config" in log


def test_python_m_fellows_fsm_daemon_help_is_the_drivers_usage(tmp_path: Path) -> None:
    """``python -m fellows_fsm.daemon --help`` answers with the driver's usage line and starts nothing, creating no
    file."""
    result = _python(tmp_path, "-m", "fellows_fsm.daemon", "--help")
    assert (result.returncode, result.stdout) == (0, "usage: python -m fellows_fsm.driver.process JOURNAL\n")
    for option in ("-x", "--journal"):  # any other option is no journal either: usage, exit 2
        result = _python(tmp_path, "-m", "fellows_fsm.daemon", option)
        assert (result.returncode, result.stderr) == (2, "usage: python -m fellows_fsm.driver.process JOURNAL\n")
    assert list(tmp_path.iterdir()) == []


def test_importing_fellows_fsm_daemon_starts_nothing() -> None:
    """The shim only runs as ``python -m``: importing it defines nothing and starts no driver."""
    shim = importlib.import_module("fellows_fsm.daemon")
    assert [name for name in vars(shim) if not name.startswith("__")] == ["annotations", "sys"]


@pytest.mark.parametrize("name", sorted(fellows_fsm.sim.__all__))
def test_each_name_of_fellows_fsm_sim_is_importable(name: str) -> None:
    """``from fellows_fsm.sim import <name>`` works for every name its ``__all__`` lists (the simulator's face)."""
    namespace: dict[str, object] = {}
    exec(f"from fellows_fsm.sim import {name}", namespace)
    assert namespace[name] is getattr(fellows_fsm.sim, name) is not None


def test_fellows_fsm_sim_lists_the_simulator() -> None:
    """The simulator's face is the simulator: ``fellows_fsm.sim`` lists ``simulate`` and ``run_sweep``, and their
    inputs and results."""
    assert {"simulate", "run_sweep", "SimParams", "RunResult", "synthetic_trace"} <= set(fellows_fsm.sim.__all__)


# --------------------------------------------------------------------------- every __all__ names its own module's names
FACES = {"cli.py": {"main"}}
"""The public faces besides every ``__init__.py``: the console script's module lists the group it puts its commands
on. The package's ``__init__`` may list any name of the package; a subpackage's, what its own modules define."""


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """A module's top-level statements, with those inside its top-level ``if``/``try``/``with`` blocks (never
    inside a function or a class)."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _statements(node.body)
            yield from _statements(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _statements(block)


def _own_and_imported(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """The names a module's own statements define (def, class, assignment), and each name it imports with the
    module it comes from."""
    own: set[str] = set()
    imported: dict[str, str] = {}
    for node in _statements(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            own.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            imported.update((a.asname or a.name, node.module or "") for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update((a.asname or a.name.split(".")[0], a.name) for a in node.names)
    return own - set(imported), imported


def _listed(tree: ast.Module) -> list[str]:
    """The names of a module's ``__all__`` (empty without one)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [str(name) for name in ast.literal_eval(node.value)]
    return []


def foreign_names(module: str, source: str) -> list[str]:
    """The names ``module`` (its path under src/fellows_fsm, e.g. ``driver/router.py``) lists in ``__all__`` without
    defining them where its face does not allow it; ``[]`` for a module whose ``__all__`` names only its own."""
    if module == "__init__.py":
        return []  # the package's face: docs/python-api.md's surface, checked above
    tree = ast.parse(source)
    own, imported = _own_and_imported(tree)
    package = "fellows_fsm." + module.rpartition("/")[0].replace("/", ".")
    face = module.endswith("/__init__.py")
    allowed = FACES.get(module, set())
    return [
        name
        for name in _listed(tree)
        if name not in own and name not in allowed and not (face and imported.get(name, "").startswith(package + "."))
    ]


def test_no_module_lists_in_all_a_name_it_does_not_define() -> None:
    """Outside the public faces, every name of a module's ``__all__`` is defined by that module (an import says
    where a thing lives); a subpackage's ``__init__`` lists only its own modules' names."""
    modules = {path.relative_to(SRC).as_posix(): path for path in sorted(SRC.rglob("*.py"))}
    assert len([m for m, p in modules.items() if _listed(ast.parse(p.read_text(encoding="utf-8")))]) > 50
    foreign = {
        module: names
        for module, path in modules.items()
        if (names := foreign_names(module, path.read_text(encoding="utf-8")))
    }
    assert foreign == {}


@pytest.mark.parametrize(
    ("module", "source", "foreign"),
    [
        (
            "driver/router.py",
            "from fellows_fsm.driver.executor import Executor\n__all__ = ['Executor']\n",
            ["Executor"],
        ),
        ("driver/router.py", "import os\n__all__ = ['os', 'Router']\nclass Router: ...\n", ["os"]),
        ("driver/router.py", "__all__ = ['Router', 'Gone']\nclass Router:\n    class Gone: ...\n", ["Gone"]),
        ("driver/router.py", "__all__ = ['Router', 'LIMIT']\nclass Router: ...\nLIMIT = 3\n", []),
        (
            "cli.py",
            "from fellows_fsm.ui.app import main, open_journal\n__all__ = ['main', 'open_journal']\n",
            ["open_journal"],
        ),
        ("core/__init__.py", "from fellows_fsm.core.dispatch import Dispatch\n__all__ = ['Dispatch']\n", []),
        ("core/__init__.py", "from fellows_fsm.journal.store import Journal\n__all__ = ['Journal']\n", ["Journal"]),
        ("__init__.py", "from fellows_fsm.journal.store import Journal\n__all__ = ['Journal']\n", []),
        ("driver/router.py", "import sys\nif sys.platform:\n    LIMIT = 3\n__all__ = ['LIMIT']\n", []),
        ("driver/router.py", "__all__ = ['later']\ndef f() -> None:\n    later = 1\n", ["later"]),
    ],
    ids=[
        "re-export",
        "module-import",
        "nested-class",
        "own-names",
        "cli-beyond-main",
        "own-package",
        "other-package",
        "top-face",
        "in-an-if",
        "a-local",
    ],
)
def test_a_name_listed_but_not_defined_is_caught(module: str, source: str, foreign: list[str]) -> None:
    """The check itself: a re-exported, imported or nested name in ``__all__`` is caught; a module's own names, cli's
    ``main``, a subpackage face's own modules' names and anything of the package's face are not."""
    assert foreign_names(module, source) == foreign
