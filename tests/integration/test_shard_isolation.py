"""Two test shards side by side never see each other's processes, even under the same temp path.

scripts/shards.py runs every 22.05 shard through scripts/in-netns (the 24.11 ones in root namespaces of their own).
A test that looks for "a driver of my journal" reads the process table; before the shards had PID spaces of their
own, one version's run found the other's driver under the same pytest temp path and failed. This runs two such
namespaces at once, each with a process whose command line names the same path, and asks each what it sees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IN_NETNS = REPO / "scripts" / "in-netns"

# Started inside each namespace: a child whose argv names PATH, then (once the other side's child is up, told by a
# file in the shared /tmp) the pids of every process in this namespace's /proc whose command line names PATH.
PROBE = r"""
import os, subprocess, sys, time
mine, theirs = sys.argv[1:3]
path = os.environ["PROBE_PATH"]  # not in our own argv: only the child names it
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", path])
open(mine, "w").write(str(child.pid))
end = time.monotonic() + 30
while not os.path.exists(theirs):
    if time.monotonic() > end:
        sys.exit("the other namespace never started its process")
    time.sleep(0.05)
def scan():
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if path.encode() in argv:
                found.append(int(pid))
    return found
seen = scan()
while child.pid not in seen and time.monotonic() < end:  # its own, once /proc shows the exec'd command line
    time.sleep(0.05)
    seen = scan()
print(child.pid, *seen)
time.sleep(1)  # keep ours alive until the other side has looked too
child.kill()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="scripts/in-netns needs root (unshare)")
def test_two_shards_with_the_same_temp_path_see_only_their_own_processes(tmp_path: Path) -> None:
    """Each of two namespaces started as the shard runner starts them sees exactly one process under the shared
    path, its own; on the host both are visible, so the check can tell the difference."""
    same = f"/tmp/fellows-tests/shared-name-{uuid.uuid4().hex[:8]}/state/journal.sqlite3"
    ready = [tmp_path / "a.ready", tmp_path / "b.ready"]
    procs = [
        subprocess.Popen(
            [str(IN_NETNS), f"iso-{side}-{os.getpid()}", sys.executable, "-c", PROBE, str(mine), str(theirs)],
            env={**os.environ, "PROBE_PATH": same},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for side, mine, theirs in (("a", ready[0], ready[1]), ("b", ready[1], ready[0]))
    ]
    # From the host, while both wait: two processes name the path, one in each namespace.
    end = time.monotonic() + 30
    while not all(p.exists() for p in ready):
        assert time.monotonic() < end, "the namespaces never started their processes"
        time.sleep(0.05)
    host_seen = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(int(pid), same)]
    outputs = [p.communicate(timeout=60) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        own, *seen = (int(x) for x in out.split())
        assert seen == [own], f"a shard saw {seen}, its own process is {own}"
    assert len(host_seen) == 2, f"the host should see both shards' processes, saw {host_seen}"


def _cmdline_has(pid: int, path: str) -> bool:
    try:
        return path.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
