"""The README as a newcomer follows it: its set-up command, then its tour line by line in a fresh shell."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, Cluster

pytestmark = [
    pytest.mark.slurm,
    # The README's set-up builds .venv with the host's Python for the host's SLURM; in the Debian 13 root (the
    # 24.11 run of scripts/test, whose venv is .venv-24.11) that venv cannot run, so the tour is the host's.
    pytest.mark.skipif(
        Path(sys.prefix).name != ".venv", reason="the README tour runs on the host (its .venv), not in another root"
    ),
]

SET_UP = "scripts/demo"
"""The README's set-up command for the main job (its first code block)."""


def _tour() -> list[str]:
    """The command lines of the README's tour block, comments stripped, in order."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A 60-second tour", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the README's tour has no ```bash block"
    lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in block[1].splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _clone(tmp_path: Path) -> Path:
    """The checkout's files (tracked and new, as in the working tree) in a fresh folder, sharing the venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    clone = tmp_path / "clone"
    for name in listed:
        source = REPO / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    (clone / ".venv").symlink_to(REPO / ".venv")  # scripts/demo installs only when the venv lacks fellows-fsm
    return clone


def _fresh_env(home: Path) -> dict[str, str]:
    """A login-like environment: no venv on PATH, no SLURM_CONF; only the machine's own runtime-dir choice."""
    env = {"HOME": str(home), "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    env["USER"] = os.environ.get("USER", "root")
    if "FELLOWS_SLURM_RUNTIME" in os.environ:  # set by scripts/in-netns for everything on that "machine"
        env["FELLOWS_SLURM_RUNTIME"] = os.environ["FELLOWS_SLURM_RUNTIME"]
    return env


def test_the_readme_tour_runs_as_written(slurm: Cluster, tmp_path: Path) -> None:
    """After scripts/demo, every line of the README's tour exits 0 in a fresh shell, in order."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"{SET_UP}   # the main job" in readme
    clone = _clone(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env = _fresh_env(home)
    demo = subprocess.run([SET_UP], cwd=clone, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]

    lines = _tour()
    assert lines[0].startswith("source .venv/bin/activate")
    # One shell for the whole tour (a line may set a variable a later one uses); after each line its exit
    # status is written down, so a failure names the line.
    script = "".join(f'{line}\necho "@@rc {i} $?" >&2\n' for i, line in enumerate(lines))
    tour = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    statuses = dict(re.findall(r"^@@rc (\d+) (\d+)$", tour.stderr, re.MULTILINE))
    failed = [f"{lines[int(i)]!r} exited {rc}" for i, rc in statuses.items() if rc != "0"]
    assert len(statuses) == len(lines), f"the tour stopped early: {tour.stderr[-3000:]}"
    assert not failed, f"{failed}\n{tour.stdout[-3000:]}\n{tour.stderr[-3000:]}"
    assert "Traceback" not in tour.stderr
    assert "config OK" in tour.stdout
    assert "is RUNNING on high-eur" in tour.stdout
    assert "is queued on high-eur as SLURM job" in tour.stdout
    assert "warning: --intent debug, but [fellows] debug_qos is not set" in tour.stderr
    assert "withdrawn (SLURM jobs cancelled:" in tour.stdout
    assert not list(clone.glob("slurm-*.out"))  # the example scripts write their output under /tmp
