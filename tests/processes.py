"""Processes as /proc shows them, for the tests that check a failed handoff left none behind."""

from __future__ import annotations

import os
from pathlib import Path


def processes_with(text: str) -> list[str]:
    """Every live (not zombie) process whose command line holds ``text``, as ``"<pid>: <command line>"``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text.encode() in cmdline and state not in (b"Z", b"X"):
            words = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry}: {words}")
    return found
