"""Which filesystem holds the journal: a network one (NFS, Lustre, GPFS, CIFS, ...) is refused for driving.

SQLite's WAL needs every process on one host, and flock on such filesystems may be per node, so the journal's
promise (nothing lost, nothing run twice) holds only on a local disk. This module reads ``statfs(2)``'s f_type
and never opens the journal.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import attrs

from fellows_fsm.errors import JournalError, JournalFull

__all__ = [
    "FULL_BELOW_BYTES",
    "NETWORK_FILESYSTEMS",
    "Filesystem",
    "check_room",
    "filesystem_of",
    "free_bytes",
    "full_error",
    "full_words",
    "refuse_network_fs",
    "statfs_type",
]

FULL_BELOW_BYTES = 256 * 1024
"""With less free than this on the state dir's filesystem, nothing is journaled, so nothing is started or queued."""

NETWORK_FILESYSTEMS: dict[int, str] = {
    0x6969: "NFS",
    0x0BD00BD0: "Lustre",
    0x47504653: "GPFS (IBM Spectrum Scale)",
    0xFF534D42: "CIFS",
    0xFE534D42: "SMB2",
    0x517B: "SMB",
    0x5346414F: "AFS",
    0x6B414653: "AFS (kAFS)",
    0x00C36400: "CephFS",
    0x19830326: "BeeGFS",
    0xAAD7AAEA: "PanFS",
    0x7461636F: "OCFS2",
    0x01161970: "GFS2",
    0x01021997: "9p",
    0x73757245: "Coda",
    0x564C: "NCP",
    0x013111A8: "IBRIX",
}
"""statfs f_type magic numbers (linux/magic.h and the vendors') of filesystems shared between hosts. FUSE (0x65735546)
is not among them: it also carries local filesystems (fuse-overlayfs in rootless containers), so sshfs and the like
are not caught."""
LOCAL_NAMES = {0xEF53: "ext2/3/4", 0x01021994: "tmpfs", 0x58465342: "XFS", 0x9123683E: "Btrfs", 0x794C7630: "overlayfs"}


@attrs.frozen
class Filesystem:
    """The filesystem a path lives on: its statfs type, a name for people, and whether hosts share it."""

    magic: int
    name: str
    network: bool


def _libc_statfs(path: str) -> int:
    """statfs(2)'s f_type for ``path`` (the first field of struct statfs, a C long on Linux)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if libc.statfs(os.fsencode(path), buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


statfs_type = _libc_statfs
"""The seam tests replace (``monkeypatch.setattr(statefs, "statfs_type", ...)``) to pose as another filesystem."""


def filesystem_of(path: Path) -> Filesystem:
    """The filesystem of ``path``, or of its nearest existing parent (a state_dir not created yet)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    magic = statfs_type(str(probe))
    if magic in NETWORK_FILESYSTEMS:
        return Filesystem(magic, NETWORK_FILESYSTEMS[magic], network=True)
    return Filesystem(magic, LOCAL_NAMES.get(magic, f"type {magic:#x}"), network=False)


def refuse_network_fs(path: Path) -> None:
    """Raise JournalError (one line: the filesystem, the fixes) when ``path`` is on a network filesystem."""
    fs = filesystem_of(path)
    if fs.network:
        raise JournalError(
            f"state_dir {path} is on {fs.name} (statfs type {fs.magic:#x}), a network filesystem where SQLite's "
            "journal can lose or double a dispatch; set state_dir to a local disk (e.g. under /tmp or /var/tmp "
            "here), or run fellows-fsm on a machine with a local disk and set [fellows] host to reach the cluster "
            "(allow_network_state_dir = true accepts it, one host only; read-only status and history still work)"
        )


def free_bytes(directory: Path) -> int | None:
    """The bytes this user may still write on ``directory``'s filesystem, or None if it cannot be told."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def full_words(directory: Path) -> str:
    """ "the state dir D is full (N bytes free on its filesystem)": what every full-disk message starts with."""
    free = free_bytes(directory)
    room = "no room" if free is None else f"{free} bytes free"
    return f"the state dir {directory} is full ({room} on its filesystem)"


def full_error(directory: Path) -> JournalFull:
    """The one line every command says when the state dir's filesystem is full."""
    return JournalFull(
        f"{full_words(directory)}: nothing can be journaled, so nothing is started or queued; free some space "
        "there, then run the command again (every walk goes on from where it stood)"
    )


def check_room(directory: Path) -> None:
    """Raise JournalFull (one line) when ``directory``'s filesystem has less than FULL_BELOW_BYTES free."""
    free = free_bytes(directory)
    if free is not None and free < FULL_BELOW_BYTES:
        raise full_error(directory)
