"""Benchmark: `fellows-fsm logs`'s read of a job's file (slurm/logs.py: ``read_chunk``) here and over the ssh master
(scripts/dev-sshd on loopback): a whole file of 1 KiB, 1 MiB and 64 MiB, and one `-f` look that finds nothing new.

Needs the loopback sshd (and so the local SLURM); run it in a network namespace of its own:

    scripts/in-netns benchlogs nice -n 10 bash -c 'scripts/dev-slurm up >/dev/null && scripts/dev-sshd up \
        >/dev/null && eval "$(scripts/dev-slurm env)" && eval "$(scripts/dev-sshd env)" &&
        .venv/bin/python -m benchmarks.logs_read'
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import spread, write_result
from benchmarks.ssh_transport import connections, ssh_port
from fellows_fsm.slurm.logs import CHUNK_BYTES, read_chunk
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.slurm.transport import SshTransport

SIZES = {"1KiB": 1024, "1MiB": 1024 * 1024, "64MiB": 64 * 1024 * 1024}


def read_all(runner: CommandRunner, path: str) -> int:
    """Read the whole file as `logs` does (chunk by chunk); its size."""
    offset = 0
    while True:
        chunk = read_chunk(runner, path, offset)
        assert chunk is not None
        offset += len(chunk)
        if len(chunk) < CHUNK_BYTES:
            return offset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--looks", type=int, default=40)
    args = parser.parse_args()
    local = CommandRunner(timeout_seconds=60)
    with tempfile.TemporaryDirectory(prefix="fellows-logs-bench-") as state, tempfile.TemporaryDirectory() as files:
        port = ssh_port(Path(state))
        remote = port.runner
        assert isinstance(remote.transport, SshTransport)
        try:
            result: dict[str, Any] = {}
            before = connections()
            for name, size in SIZES.items():
                path = Path(files) / f"it's {name}.out"
                path.write_bytes(os.urandom(size))
                times: dict[str, list[float]] = {"local": [], "ssh": []}
                for _ in range(args.repeat):
                    for where, runner in (("local", local), ("ssh", remote)):
                        t0 = time.perf_counter()
                        assert read_all(runner, str(path)) == size
                        times[where].append(time.perf_counter() - t0)
                result[name] = {where: spread(values, 4) for where, values in times.items()}
            path = Path(files) / "follow.out"
            path.write_bytes(b"x" * 4096)
            looks = []
            for _ in range(args.looks):
                t0 = time.perf_counter()
                assert read_chunk(remote, str(path), 4096) == b""
                looks.append(time.perf_counter() - t0)
            result["follow_look_nothing_new_ssh_seconds"] = spread(looks, 4)
            result["new_sshd_connections"] = connections() - before
            result["ssh_commands"] = dict(remote.calls)
        finally:
            remote.transport.close()
    path_out = write_result("logs_read", result)
    print(path_out.read_text())


if __name__ == "__main__":
    main()
