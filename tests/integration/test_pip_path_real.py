"""The pip user's first hour, as CI proves it: the wheel and sdist built from the checkout once, the wheel installed
in a clean venv outside the checkout, then `--version`, `init` against the real local SLURM (its grants read from the
real sacctmgr), `config check`, `submit --detach` and `status`, all from a directory that is not the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from fellows_fsm.journal.store import Journal

from .conftest import REPO, Cluster
from .settled import jobs_of

pytestmark = pytest.mark.slurm

WHEELHOUSE = REPO / "build" / "wheelhouse"
"""The runtime dependencies' wheels, fetched by scripts/test before the shards start (they have no network)."""
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run ``argv``; fail naming its output unless it exits 0; its stdout."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clean venv's bin dir, with the wheel built (once) from a copy of the checkout installed in it."""
    if not (WHEELHOUSE / ".fellows-stamp").exists():
        pytest.fail(f"{WHEELHOUSE} is missing: scripts/test fetches the dependencies' wheels there", pytrace=False)
    base = tmp_path_factory.mktemp("pip")
    source = base / "source"  # a copy: two versions' shards build at once, and a build writes into its tree
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = base / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)], cwd=base)
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))], cwd=base)
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=base)
    wheel = next(dist.glob("*.whl"))
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-index", "--find-links", str(WHEELHOUSE), str(wheel)],
        cwd=base,
    )  # fmt: skip
    return venv / "bin"


def test_the_wheel_and_sdist_carry_the_license_and_a_readme_that_stands_alone(installed: Path) -> None:
    """The wheel holds LICENSE and SPDX metadata; its description (the README) links nowhere inside the repo."""
    dist = installed.parent.parent / "dist"
    with zipfile.ZipFile(next(dist.glob("*.whl"))) as wheel:
        names = wheel.namelist()
        meta = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: MIT" in meta
    assert "Classifier: Programming Language :: Python :: 3.11" in meta
    assert "](docs/" not in meta
    assert "](" not in meta.split("\n\n", 1)[1]  # no relative link a package index would break
    sdist = _run(["tar", "tzf", str(next(dist.glob("*.tar.gz")))], cwd=dist)
    assert f"fellows_fsm-{VERSION}/LICENSE" in sdist.split()


def test_a_pip_user_inits_checks_submits_and_reads_status_from_anywhere(
    installed: Path, slurm: Cluster, tmp_path: Path
) -> None:
    """From a directory that is not the checkout, the installed wheel: --version; init writes the user's config
    from the real grants (never over it again); config check and config path; submit --detach queues on the best
    granted QoS; status --json from another directory names that config and journal."""
    home = tmp_path / "home"
    anywhere = home / "projects" / "run1"
    elsewhere = tmp_path / "elsewhere"
    for folder in (anywhere, elsewhere):
        folder.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "PATH": f"{installed}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "USER": os.environ.get("USER", "root"),
        "SLURM_CONF": slurm.slurm_conf,
        "XDG_CONFIG_HOME": str(home / ".config"),
    }
    if "FELLOWS_SLURM_RUNTIME" in os.environ:
        env["FELLOWS_SLURM_RUNTIME"] = os.environ["FELLOWS_SLURM_RUNTIME"]

    def fsm(*args: str, cwd: Path = anywhere, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["fellows-fsm", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == code, f"fellows-fsm {' '.join(args)} exited {done.returncode}: {done.stderr}"
        return done

    assert fsm("--version").stdout.strip() == f"fellows-fsm, version {VERSION}"
    where = _run([str(installed / "python"), "-c", "import fellows_fsm; print(fellows_fsm.__file__)"], cwd=anywhere)
    assert not where.strip().startswith(str(REPO))

    written = home / ".config" / "fellows-fsm" / "config.toml"
    init = fsm("init")
    assert f"wrote {written}: ladder high-eur -> normal-eur -> low-eur; debug QoS dev-eur" in init.stdout
    text = written.read_text(encoding="utf-8")
    assert 'qos = "high-eur"' in text
    assert "# [budget]" in text
    refused = fsm("init", code=3)
    assert "exists; `fellows-fsm init --force`" in refused.stderr
    assert written.read_text(encoding="utf-8") == text

    assert "config OK" in fsm("config", "check").stdout
    journal = home / ".local" / "state" / "fellows-fsm" / "journal.sqlite3"
    assert json.loads(fsm("config", "path", "--json", cwd=elsewhere).stdout) == {
        "config": str(written),
        "journal": str(journal),
        "found_by": "the user config",
    }
    script = slurm.script(seconds=300)
    submitted = fsm("submit", "--detach", "--gpus", "8", script, "--", *slurm.job_args())
    dispatch_id = submitted.stdout.strip()
    try:
        [row] = json.loads(fsm("status", dispatch_id, "--json", cwd=elsewhere).stdout)
        assert (row["dispatch_id"], row["qos"], row["slurm_job_id"] is not None) == (dispatch_id, "high-eur", True)
        assert (row["config"], row["journal"]) == (str(written), str(journal))
        table = fsm("status", cwd=elsewhere).stdout
        assert f"config {written}\njournal {journal}\n" in table
        assert dispatch_id in table
    finally:
        fsm("cancel", dispatch_id)
        fsm("driver", "stop")
    # Settled: one job on the cluster for the dispatch, none left pending or running, nothing handed to a paid lane.
    slurm.wait_for(
        lambda: not [j for j in jobs_of(slurm, dispatch_id) if j.state in ("PENDING", "RUNNING")],
        f"dispatch {dispatch_id}'s job to end after cancel",
    )
    assert len(jobs_of(slurm, dispatch_id)) == 1
    reader = Journal(journal, readonly=True)
    try:
        row_after = reader.dispatch(dispatch_id)
        assert row_after is not None
        assert (row_after.final, reader.handoff(dispatch_id)) == (True, None)
    finally:
        reader.close()
