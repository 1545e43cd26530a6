"""Run the pytest suite in shards side by side, each in namespaces of its own, and report them as one run.

scripts/test calls this after its installs, ruff and mypy. For every SLURM version it runs M shards of the unit
tests and N shards of the rest (the real-SLURM tests), every shard at once:
  22.05 (the host's own): ``scripts/in-netns`` gives each shard a loopback, a PID space and a runtime dir of its
        own, so its fellows cluster, second cluster and sshd are its own, on the same ports as every other shard's;
  24.11: each shard has its own Debian 13 root namespaces (``scripts/dev-slurm --slurm 24.11`` with a runtime dir
        of its own), each unit shard a fresh ``scripts/slurm-root run``.
Every shard has its own temporary directory (pytest's ``--basetemp``) and sees only its own processes, so two
shards' same-named temp paths never meet. Tests are dealt to the shards by their measured durations
(tests/durations.json; whole files, longest first, each to the shard with the least so far). The unit shards run
niced: they only want CPU, the real-SLURM tests want it on time (two of them get twice one's share of what the
real tests leave, and both cores once those are done). The run ends with each shard's summary, the 15
slowest tests and one line over all shards; its exit status is non-zero when any shard failed or ran no test.
Each shard's output is kept in build/test-logs/<shard>.log.

Environment: FELLOWS_SLURM_VERSIONS (default "22.05 24.11"), FELLOWS_TEST_SHARDS (real-SLURM shards per version,
default 6), FELLOWS_UNIT_SHARDS (unit shards per version, default 2), FELLOWS_TEST_ONLY (shard names, e.g.
"22.05-real-2": run only those, dealt exactly as in a whole run, to replay a failed shard),
FELLOWS_TEST_DURATIONS=refresh (write this run's durations into tests/durations.json).
Arguments are pytest's: paths or node ids narrow what is collected and dealt; every other argument goes to every
shard.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "build" / "test-logs"
DURATIONS = REPO / "tests" / "durations.json"
CHECKOUT_TAG = hashlib.sha256(str(REPO).encode()).hexdigest()[:4]
TEMP = Path("/tmp/fellows-tests")  # noqa: S108  (root only, one dir per shard, removed when it passes)
DEFAULT_SHARDS = 6
DEFAULT_UNIT_SHARDS = 2
UNIT = "tests/unit/"
# mermaid's own parser runs on Node.js, which the Debian 13 root has not: that file runs on the host only.
HOST_ONLY = ("tests/unit/ui/test_mermaid_valid.py",)
# The shared ledger's tests need Debian's PostgreSQL (scripts/dev-postgres), installed on the host only; they do not
# depend on the SLURM version, so they run in the host's real shards.
HOST_ONLY_REAL = ("tests/integration/test_ledger_",)
# A test no durations file knows yet counts as this many seconds (a real-SLURM test's median is of this order).
UNKNOWN_SECONDS = {"unit": 0.2, "real": 15.0}
SLOWEST = 15


@dataclass
class Shard:
    """One pytest process: a version, a kind (unit or real), the ids dealt to it, and how it went."""

    version: str
    kind: str
    number: int
    ids: list[str] = field(default_factory=list)
    estimate: float = 0.0
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    wall: float = 0.0
    returncode: int | None = None
    report: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The shard's name in logs, namespaces and runtime dirs: e.g. 24.11-real-2."""
        return f"{self.version}-{self.kind}-{self.number}"

    @property
    def slug(self) -> str:
        """A short name of letters, digits and '-' (scripts/in-netns's rule) for runtime dirs and namespaces, unique
        per checkout too, so two checkouts testing at once never share a cluster's runtime dir in /tmp."""
        return f"t{CHECKOUT_TAG}-{self.version.replace('.', '')}{self.kind[0]}{self.number}"

    @property
    def temp(self) -> Path:
        """The shard's pytest --basetemp (the 22.05 shards share the host's /tmp)."""
        return TEMP / self.slug

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"

    @property
    def report_path(self) -> Path:
        return LOGS / f"{self.name}.json"


def say(line: str) -> None:
    print(line, flush=True)


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """The arguments naming tests (an existing path, with or without ``::``) and every other one."""
    selections, options = [], []
    for arg in args:
        if not arg.startswith("-") and (REPO / arg.split("::", 1)[0]).exists():
            selections.append(arg)
        else:
            options.append(arg)
    return selections, options


def collect(selections: list[str], options: list[str]) -> list[str]:
    """Every test id the arguments select, in pytest's order, collected once on the host."""
    argv = [str(REPO / ".venv/bin/pytest"), "--collect-only", "-q", "-p", "no:cacheprovider", *options, *selections]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    ids = [line for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if proc.returncode not in (0, 5) or (proc.returncode == 0 and not ids):
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"scripts/test: collecting the tests failed (pytest exited {proc.returncode})")
    return ids


def load_durations() -> dict[str, dict[str, float]]:
    try:
        data = json.loads(DURATIONS.read_text())
    except FileNotFoundError:
        return {}
    return {version: {k: float(v) for k, v in table.items()} for version, table in data.items()}


def estimate(test_id: str, table: dict[str, float], kind: str) -> float:
    """The measured duration of a test, else the median of its file's measured tests, else a default."""
    if test_id in table:
        return table[test_id]
    file = test_id.split("::", 1)[0]
    known = sorted(v for k, v in table.items() if k.startswith(file + "::"))
    return known[len(known) // 2] if known else UNKNOWN_SECONDS[kind]


def deal(ids: list[str], shards: list[Shard], table: dict[str, float]) -> None:
    """Whole files, longest first, each to the shard with the least estimated time so far; each shard keeps pytest's
    order. A file stays in one shard so its tests keep the neighbours and order they were written with."""
    order = {test_id: i for i, test_id in enumerate(ids)}
    files: dict[str, list[str]] = {}
    for test_id in ids:
        files.setdefault(test_id.split("::", 1)[0], []).append(test_id)
    kind = shards[0].kind
    weight = {file: sum(estimate(t, table, kind) for t in tests) for file, tests in files.items()}
    for file in sorted(files, key=lambda f: (-weight[f], f)):
        target = min(shards, key=lambda s: (s.estimate, s.number))
        target.ids.extend(files[file])
        target.estimate += weight[file]
    for shard in shards:
        shard.ids.sort(key=order.__getitem__)


def plan(ids: list[str], versions: list[str], native: str, per_version: int, unit_per_version: int) -> list[Shard]:
    durations = load_durations()
    shards: list[Shard] = []
    for version in versions:
        table = durations.get(version, {})
        unit = [t for t in ids if t.startswith(UNIT) and (version == native or not t.startswith(HOST_ONLY))]
        real = [t for t in ids if not t.startswith(UNIT) and (version == native or not t.startswith(HOST_ONLY_REAL))]
        unit_files = {t.split("::", 1)[0] for t in unit}
        unit_shards = [Shard(version, "unit", n + 1) for n in range(min(unit_per_version, len(unit_files)))]
        if unit_shards:
            deal(unit, unit_shards, table)
            shards.extend(unit_shards)
        real_files = {t.split("::", 1)[0] for t in real}
        real_shards = [Shard(version, "real", n + 1) for n in range(min(per_version, len(real_files)))]
        if real_shards:
            deal(real, real_shards, table)
            shards.extend(real_shards)
    return shards


def command(shard: Shard, native: str, options: list[str]) -> list[str]:
    """The shell command that runs one shard in namespaces of its own (ids come from an @file)."""
    args_file = LOGS / f"{shard.name}.args"
    args_file.write_text("\n".join(shard.ids) + "\n")
    pytest_args = ["-p", "no:cacheprovider", *options, f"@{args_file}"]
    env = [f"FELLOWS_TEST_REPORT={shard.report_path}", f"FELLOWS_TEST_SHARD={shard.name}"]
    if os.environ.get("CI"):
        env.append(f"CI={os.environ['CI']}")
    q = shlex.quote
    if shard.version == native:
        inner = ["env", *env, str(REPO / ".venv/bin/pytest"), f"--basetemp={shard.temp}", *pytest_args]
        return [str(REPO / "scripts/in-netns"), shard.slug, *inner]
    venv_pytest = str(REPO / f".venv-{shard.version}/bin/pytest")
    inner = ["env", *env, venv_pytest, *pytest_args]
    if shard.kind == "unit":
        return [str(REPO / "scripts/slurm-root"), "run", "trixie", *inner]
    # Its own root namespaces with its own cluster; the root's /tmp is that namespace's own tmpfs.
    runtime = f"/tmp/fellows-slurm-{shard.slug}"  # noqa: S108  (scripts/in-netns's naming, for dev-slurm's state)
    dev = f"FELLOWS_SLURM_RUNTIME={q(runtime)} {q(str(REPO / 'scripts/dev-slurm'))}"
    run = " ".join(q(a) for a in inner)
    script = (
        f"rc=0; {dev} --slurm {shard.version} up && {dev} --slurm {shard.version} exec {run} || rc=$?; "
        f"{dev} --slurm {shard.version} down >/dev/null 2>&1 || true; exit $rc"
    )
    return ["bash", "-c", script]


def start(shard: Shard, native: str, options: list[str]) -> None:
    shard.report_path.unlink(missing_ok=True)
    TEMP.mkdir(parents=True, exist_ok=True)
    argv = command(shard, native, options)
    if shard.kind == "unit":
        argv = ["nice", "-n", "10", *argv]
    with shard.log.open("wb") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        shard.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    shard.started = time.monotonic()


def read_report(shard: Shard) -> None:
    try:
        shard.report = json.loads(shard.report_path.read_text())["tests"]
    except (FileNotFoundError, ValueError, KeyError):
        shard.report = {}


def counts(reports: list[dict[str, dict[str, object]]]) -> dict[str, int]:
    tally = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "xpassed": 0}
    for report in reports:
        for entry in report.values():
            tally[str(entry["outcome"])] += 1
    return tally


def summary(tally: dict[str, int]) -> str:
    line = f"{tally['passed']} passed, {tally['failed']} failed, {tally['skipped']} skipped"
    extra = [f"{tally[k]} {k}" for k in ("xfailed", "xpassed") if tally[k]]
    return line + (f" ({', '.join(extra)})" if extra else "")


def last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "(no output)"


def refresh(shards: list[Shard], collected: list[str], narrowed: bool) -> None:
    """Write this run's durations into tests/durations.json (kept ids of other runs unless the run was whole)."""
    data = load_durations()
    wanted = set(collected)
    for shard in shards:
        table = data.setdefault(shard.version, {})
        for test_id, entry in shard.report.items():
            table[test_id] = round(float(entry["duration"]), 2)
    for version, table in data.items():
        if not narrowed:
            data[version] = {k: v for k, v in sorted(table.items()) if k in wanted}
    DURATIONS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    say(f"scripts/test: durations written to {DURATIONS.relative_to(REPO)}")


def run_all(shards: list[Shard], native: str, options: list[str]) -> float:
    """Start every shard at once; say each one's outcome as it ends; the wall time of them all."""
    t0 = time.monotonic()
    for shard in shards:
        start(shard, native, options)
    running = list(shards)
    while running:
        time.sleep(0.5)
        for shard in list(running):
            assert shard.proc is not None
            if shard.proc.poll() is None:
                continue
            running.remove(shard)
            shard.returncode = shard.proc.returncode
            shard.wall = time.monotonic() - shard.started
            read_report(shard)
            state = "ok" if shard.returncode == 0 and shard.report else "FAILED"
            say(f"   {shard.name} {state} in {shard.wall / 60:.1f} min: {summary(counts([shard.report]))}")
    return time.monotonic() - t0


def failed(shards: list[Shard]) -> list[Shard]:
    """The shards that failed a test, ended badly, or ran no test."""
    return [s for s in shards if s.returncode != 0 or not s.report]


def report(shards: list[Shard]) -> None:
    """A failed shard's failures (from its log), every shard's summary, the slowest tests."""
    for shard in failed(shards):
        say(f"== {shard.name} failed (exit {shard.returncode}); its log is {shard.log.relative_to(REPO)}")
        text = shard.log.read_text(errors="replace")
        at = text.find("= FAILURES =")
        sys.stdout.write(text[max(at - 200, 0) :][-80000:] if at >= 0 else text[-20000:])
    say("== shards")
    for shard in shards:
        tally = summary(counts([shard.report]))
        say(f"   {shard.name:16} {shard.wall / 60:5.1f} min  {tally}  | {last_line(shard.log)}")
    say(f"== the {SLOWEST} slowest tests")
    timed = [(float(e["duration"]), s.version, t) for s in shards for t, e in s.report.items()]
    for seconds, version, test_id in sorted(timed, reverse=True)[:SLOWEST]:
        say(f"   {seconds:7.1f} s  {version}  {test_id}")


def main(args: list[str]) -> int:
    # A runner started in the background by a shell without job control (`scripts/test &`, nohup) inherits SIGINT
    # ignored, and an ignored signal stays ignored through exec: every shard's CLI would then be deaf to Ctrl-C,
    # which the Ctrl-C tests send. Handled here, it is back to its default in every child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    versions = os.environ.get("FELLOWS_SLURM_VERSIONS", "22.05 24.11").split()
    native = subprocess.run(
        [str(REPO / "scripts/dev-slurm"), "native-version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    raw = os.environ.get("FELLOWS_TEST_SHARDS", str(DEFAULT_SHARDS))
    if not raw.isdigit() or not 1 <= int(raw) <= 16:
        say(f"scripts/test: FELLOWS_TEST_SHARDS is '{raw}': use a whole number from 1 to 16")
        return 2
    unit_raw = os.environ.get("FELLOWS_UNIT_SHARDS", str(DEFAULT_UNIT_SHARDS))
    if not unit_raw.isdigit() or not 1 <= int(unit_raw) <= 8:
        say(f"scripts/test: FELLOWS_UNIT_SHARDS is '{unit_raw}': use a whole number from 1 to 8")
        return 2
    selections, options = split_args(args)
    ids = collect(selections, options)
    if not ids:
        say("scripts/test: no test matches the arguments")
        return 1
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir(parents=True)
    shards = plan(ids, versions, native, int(raw), int(unit_raw))
    only = os.environ.get("FELLOWS_TEST_ONLY", "").replace(",", " ").split()
    if only:
        unknown = sorted(set(only) - {s.name for s in shards})
        if unknown:
            names = ", ".join(s.name for s in shards)
            say(f"scripts/test: FELLOWS_TEST_ONLY names no shard of this run: {', '.join(unknown)} (shards: {names})")
            return 2
        shards = [s for s in shards if s.name in only]
    say(f"== pytest: {len(ids)} tests in {len(shards)} shards side by side (logs in {LOGS.relative_to(REPO)}/)")
    for shard in shards:
        say(f"   {shard.name}: {len(shard.ids)} tests, about {shard.estimate / 60:.1f} min by tests/durations.json")
    wall = run_all(shards, native, options)
    report(shards)
    if os.environ.get("FELLOWS_TEST_DURATIONS") == "refresh":
        refresh(shards, ids, narrowed=bool(selections))
    for shard in shards:
        if shard.returncode == 0:
            shutil.rmtree(shard.temp, ignore_errors=True)
    tally = counts([s.report for s in shards])
    say(f"{summary(tally)} in {wall / 60:.1f} min over {len(shards)} shards ({', '.join(versions)})")
    if bad := failed(shards):
        say(f"scripts/test: failed shards: {', '.join(s.name for s in bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
