"""What checking the world costs (issue 41 items 4 and 5): ``fellows-fsm config check`` on the local real SLURM
(the default ladder granted; one QoS missing; SLURM not on PATH; ``--offline``), and the background driver's look
at its own PATH each turn (healthy and cached, healthy looked up, a PATH without sbatch).

Run in a network namespace of its own with the local SLURM up (docs/benchmarks.md has the command); prints one
JSON object. Nothing is submitted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

from fellows_fsm.driver.environment import Health, missing_command
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings

FELLOWS_FSM = Path(sys.executable).parent / "fellows-fsm"
RUNS = 10


def _config(folder: Path, ladder: str = "") -> Path:
    path = folder / "fellows.toml"
    path.write_text(f'state_dir = "{folder / "state"}"\n\n[fellows]\npark_cap_seconds = 600\n{ladder}', "utf-8")
    return path


def _timed(config: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, int]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(FELLOWS_FSM), "--config", str(config), "config", "check", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    return time.perf_counter() - t0, done.returncode


def _row(config: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    runs = [_timed(config, *args, env=env) for _ in range(RUNS)]
    seconds = sorted(s for s, _ in runs)
    return {
        "exit": sorted({code for _, code in runs}),
        "min_s": round(seconds[0], 3),
        "median_s": round(statistics.median(seconds), 3),
        "max_s": round(seconds[-1], 3),
    }


def _look(health: Health, journal: Journal, n: int) -> float:
    """Microseconds per look."""
    return round(timeit.timeit(lambda: health.refresh(journal, lambda: None), number=n) / n * 1e6, 2)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-world-"))
    bare = folder / "bare-bin"
    bare.mkdir()
    out: dict[str, object] = {"runs": RUNS, "path_entries": len(os.environ.get("PATH", "").split(":"))}
    for name in ("good", "missing"):
        (folder / name).mkdir()
    good = _config(folder / "good")
    out["config_check"] = {
        "granted ladder (exit 0)": _row(good),
        "one QoS missing (exit 3)": _row(_config(folder / "missing", 'qos_ladder = ["nope-eur"]\n')),
        "SLURM not on PATH (exit 3)": _row(good, env={**os.environ, "PATH": str(bare)}),
        "--offline": _row(good, "--offline"),
    }
    journal = Journal(folder / "j.sqlite3")
    lanes = (SlurmSettings(),)
    assert missing_command(lanes, os.environ) is None, "run with SLURM's commands on PATH"
    cached = Health(lanes)
    uncached = Health(lanes)
    broken = Health(lanes, env={"PATH": str(bare)})
    broken.refresh(journal, lambda: None)  # its problem journaled once; later looks write nothing

    def fresh() -> None:
        uncached.healthy = None
        uncached.refresh(journal, lambda: None)

    out["driver_look_us"] = {
        "healthy, cached": _look(cached, journal, 20000),
        "healthy, looked up": round(timeit.timeit(fresh, number=2000) / 2000 * 1e6, 2),
        "sbatch missing, problem journaled already": _look(broken, journal, 2000),
    }
    journal.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
