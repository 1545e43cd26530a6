"""Where a command runs: here (``LocalTransport``), or on the cluster's login host over ONE shared ssh master
connection (``SshTransport``). ``MockTransport(handler)`` in slurm/mock.py answers from a function.

A transport runs an argv list (never a local shell) and tells its own failures apart from the command's: no
answer (and whether the command may have run anyway), a login ssh refuses, a program that is not there. It
knows nothing of SLURM: which variables to set or drop comes with each request.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

from fellows_fsm.errors import ConfigError, SshLoginRefused

__all__ = [
    "CommandMissing",
    "LocalTransport",
    "NoAnswer",
    "Reply",
    "Request",
    "SshTransport",
    "Transport",
    "remote_command",
]

log = logging.getLogger(__name__)


@attrs.frozen
class Request:
    """One command to run: its argv, variables to set and variable-name prefixes to drop (but the names in
    ``keep_env``), stdin, a time limit, and (here only) the directory to run it in."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = attrs.field(factory=dict)
    drop_env_prefixes: tuple[str, ...] = ()
    stdin: bytes | None = None
    timeout_seconds: float = 30.0
    keep_env: tuple[str, ...] = ()
    cwd: str | None = None
    """The working directory of a local command (None: this process's); a remote one starts in the login's."""


@attrs.frozen
class Reply:
    """What the command itself returned (never a transport failure: those raise)."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


class NoAnswer(Exception):
    """The command got no answer: ``why``, and ``delivered`` when it may have run anyway (so not to be repeated)."""

    def __init__(self, why: str, *, delivered: bool) -> None:
        super().__init__(why)
        self.why = why
        self.delivered = delivered


class CommandMissing(Exception):
    """The program is not installed where the transport runs it; the message says where."""


@runtime_checkable
class Transport(Protocol):
    """Runs one request and returns the command's reply; raises NoAnswer, CommandMissing or SshLoginRefused."""

    remote: bool
    """True when commands run on another host (a script must then travel with the submit)."""
    where: str
    """Where commands run, for messages: 'here' or 'on <host> over ssh'."""
    reach_hint: str
    """What to try when the cluster does not answer."""
    peer: str
    """What a command that gets no answer could not reach, for messages."""

    def run(self, request: Request) -> Reply: ...


def _decode(data: bytes) -> str:
    # errors="replace": a job name or comment in another encoding must not break a whole poll.
    return data.decode("utf-8", errors="replace")


class LocalTransport:
    """Runs commands on this machine, with this process's environment (read at each call, or ``env``)."""

    remote = False
    where = "here"
    peer = "the SLURM controller"
    reach_hint = "check `scontrol ping` and that SLURM_CONF points at the right cluster"

    def __init__(self, env: Mapping[str, str] | None = None, *, slurm_conf: str | None = None) -> None:
        self.env = None if env is None else dict(env)
        self.slurm_conf = slurm_conf
        """A cluster's own slurm.conf (SLURM_CONF of every command), for a second cluster reached from here."""

    def run(self, request: Request) -> Reply:
        """``subprocess.run`` of the argv with the filtered environment; a timeout is NoAnswer(delivered=True)."""
        base: Mapping[str, str] = os.environ if self.env is None else self.env
        if self.slurm_conf is not None:
            base = {**base, "SLURM_CONF": self.slurm_conf}
        drop, keep = request.drop_env_prefixes, request.keep_env
        env = {k: v for k, v in base.items() if k in keep or not k.startswith(drop)} | dict(request.env)
        name = os.path.basename(request.argv[0])
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                request.argv,
                input=request.stdin,
                stdin=subprocess.DEVNULL if request.stdin is None else None,
                capture_output=True,
                timeout=request.timeout_seconds,
                env=env,
                cwd=request.cwd,
                check=False,
            )
        except FileNotFoundError:
            if request.cwd is not None and not os.path.isdir(request.cwd):
                raise CommandMissing(f"the directory {request.cwd} to run {name!r} in does not exist here") from None
            path = env.get("PATH", "")  # named: a driver started from a shell without `module load slurm` keeps it
            raise CommandMissing(f"{name!r} is not installed or not on PATH here (PATH={path})") from None
        except PermissionError as exc:
            raise CommandMissing(f"{name!r} cannot be executed here: {exc}") from None
        except subprocess.TimeoutExpired:
            raise NoAnswer(f"no reply within {request.timeout_seconds:g} s", delivered=True) from None
        return Reply(proc.returncode, _decode(proc.stdout), _decode(proc.stderr), time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------------- remote quoting
# A word made only of these is taken literally inside single quotes by sh, bash, dash, zsh, ksh, csh, tcsh and
# fish alike: tcsh expands '!' and refuses a newline even there, and fish reads '\' there; anything else
# (and every non-ASCII byte) travels base64-encoded instead.
_SINGLE_QUOTE_SAFE = re.compile(r"^[\x20-\x7e]*$")
_NOT_SAFE = frozenset("'!\\")
_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The remote side is a POSIX sh whatever the login shell: the login shell only sees `sh -c '<program>' sh
# '<word>'...`, with no character it treats specially inside single quotes. The program drops the variables
# named by the prefixes, sets the requested ones through env(1), and maps the command's own exit 255 to 254:
# 255 is what ssh itself exits with for its own failures, so a 255 reaching us is always ssh's.
_UNSET = (
    'set -f; for n in $(env | sed -n "s/=.*//p"); do case $n in {kept}{cases}) command unset "$n" 2>/dev/null;; esac; '
    "done; "
)
_DECODE = 'for a in "$@"; do shift; v=$(printf %s "$a" | base64 -d; echo x); set -- "$@" "${v%x}"; done; '
_RUN = 'env "$@"; r=$?; if test $r -eq 255; then exit 254; fi; exit $r'
_COMMAND_MISSING = 127


def _quotable(word: str) -> bool:
    return bool(_SINGLE_QUOTE_SAFE.match(word)) and not (_NOT_SAFE & set(word))


def remote_command(
    argv: Sequence[str], env: Mapping[str, str], drop_env_prefixes: Sequence[str], keep_env: Sequence[str] = ()
) -> str:
    """The one string ssh hands the remote login shell: ``argv`` run with ``env`` set and the variables whose
    names start with a prefix dropped (but those named in ``keep_env``, e.g. SLURM_CONF from sshd's SetEnv).

    Every value arrives literal (spaces, quotes, ``$``, ``;``, newlines) under bash, sh, zsh, csh, tcsh or fish.
    """
    for prefix in drop_env_prefixes:
        if not _PREFIX.match(prefix):
            raise ValueError(f"environment prefix {prefix!r} must be letters, digits and '_'")
    for key in [*env, *keep_env]:
        if not _PREFIX.match(key):
            raise ValueError(f"environment variable name {key!r} must be letters, digits and '_'")
    words = [f"{key}={value}" for key, value in env.items()]
    if not argv or "=" in argv[0]:
        raise ValueError(f"argv {list(argv)!r} must start with a program name")
    words += argv
    kept = "".join(f"{name}) ;; " for name in keep_env)
    program = _UNSET.format(kept=kept, cases="|".join(f"{p}*" for p in drop_env_prefixes)) if drop_env_prefixes else ""
    if all(_quotable(word) for word in words):
        quoted = [f"'{word}'" for word in words]
    else:
        program += _DECODE
        quoted = [base64.b64encode(word.encode("utf-8")).decode("ascii") or "''" for word in words]
    program += _RUN
    return " ".join(["sh", "-c", f"'{program}'", "sh", *quoted])


# ----------------------------------------------------------------------------------------------- ssh
# ssh's own words for a login that will not work until someone acts (a host key, a key, a name).
_LOGIN_REFUSED = (
    (
        "Host key verification failed",
        "its host key is unknown or has changed: check it, then add it with "
        "`ssh {host}` once or to the known_hosts file your ssh_options name",
    ),
    (
        "REMOTE HOST IDENTIFICATION HAS CHANGED",
        "its host key has changed: check with the cluster's admins, then replace the old key in known_hosts",
    ),
    (
        "Permission denied",
        "it refused authentication: set up key-based login (ssh-copy-id, or IdentityFile in the "
        "ssh config) so `ssh -o BatchMode=yes {host} true` works without a prompt",
    ),
    (
        "Could not resolve hostname",
        "ssh cannot resolve the name: fix [fellows] host, or add a Host entry for it to your ssh config",
    ),
    (
        "Too many authentication failures",
        "it refused authentication: name one key with IdentityFile and IdentitiesOnly yes in the ssh config",
    ),
    ("Bad configuration option", "the ssh options or ssh config are wrong: fix [fellows] ssh_options"),
    ("Can't open user config file", "the ssh config named by -F cannot be read: fix [fellows] ssh_options"),
    ("unknown option --", "ssh refused an option: fix [fellows] ssh_options"),
    ("Unsupported option", "ssh refused an option: fix [fellows] ssh_options"),
    ("Bad owner or permissions", "the ssh config's permissions are refused: chmod 600 it"),
    (
        "no matching host key type",
        "no host key type is shared with the server: set HostKeyAlgorithms in the ssh config",
    ),
)
# ssh's words for a connection that never reached the remote shell: safe to repeat any command.
_NOT_CONNECTED = (
    "Connection refused",
    "Connection timed out",
    "No route to host",
    "Network is unreachable",
    "kex_exchange_identification",
    "banner exchange",
    "Connection reset by peer",
)
_SOCKET_MAX = 88  # sun_path holds 107 bytes, and ssh binds the socket under a 17-character random suffix first
_DESTINATION = re.compile(r"^(?:ssh://)?(?:[^\s@/:]+@)?[^\s@/:-][^\s@/:]*(?::\d+)?$")


def check_destination(host: str) -> str:
    """``host`` if it is an ssh destination (an ssh-config Host, user@host, or ssh://user@host:port), else a
    ConfigError naming it."""
    if not isinstance(host, str) or not _DESTINATION.match(host) or (":" in host and not host.startswith("ssh://")):
        raise ConfigError(
            f"host={host!r} is not an ssh destination; give a Host of your ssh config ('charmander'), "
            "'user@host', or 'ssh://user@host:port'"
        )
    return host


class SshTransport:
    """Runs every command on ``host`` over ONE ssh master connection, shared through a control socket.

    The master is opened by the first command (``ControlMaster=auto``) and outlives it (``ControlPersist``), so
    the driver and every command after it reuse it: a poll is one command round trip, no new connection. ssh
    never prompts (``BatchMode``) and gives up connecting after ``connect_timeout_seconds``. A master that dies
    is replaced by the next command. Its socket lives under ``control_dir`` (normally ``<state_dir>/ssh``).
    """

    remote = True

    def __init__(
        self,
        host: str,
        *,
        options: Sequence[str] = (),
        control_dir: Path,
        connect_timeout_seconds: float = 10.0,
        persist_seconds: float = 600.0,
        ssh: str = "ssh",
    ) -> None:
        self.host = check_destination(host)
        self.options = tuple(options)
        self.connect_timeout_seconds = connect_timeout_seconds
        self.persist_seconds = persist_seconds
        self.ssh = ssh
        self.where = f"on {host} over ssh"
        self.peer = f"{host} over ssh"
        self.reach_hint = f"check that `ssh {host} scontrol ping` answers from here"
        self.control_path = self._control_path(Path(control_dir))

    def _control_path(self, control_dir: Path) -> Path:
        """The master's socket: one per destination and options, under ``control_dir`` when the name fits."""
        digest = hashlib.sha256("\0".join([self.host, *self.options]).encode()).hexdigest()[:16]
        path = control_dir / f"cm-{digest}"
        if len(os.fsencode(path)) > _SOCKET_MAX:
            # A socket path is limited to ~104 bytes: a deep state_dir gets its socket in a private temp dir.
            control_dir = Path(tempfile.gettempdir()) / f"fellows-fsm-{os.getuid()}"
            path = control_dir / f"cm-{digest}"
        control_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    def ssh_argv(self, *tail: str) -> list[str]:
        """ssh with the options this transport enforces first (ssh keeps the first value of each option)."""
        return [
            self.ssh,
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={max(1, round(self.connect_timeout_seconds))}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={self.control_path}",
            "-o", f"ControlPersist={max(1, round(self.persist_seconds))}",
            # A dead link ends the master within ~15 s, so the next command connects afresh instead of hanging.
            "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3",
            "-T",
            *self.options,
            *tail,
        ]  # fmt: skip

    def run(self, request: Request) -> Reply:
        """Run the request on the host; ssh's own failures (exit 255) raise, the command's exit is returned."""
        command = remote_command(request.argv, request.env, request.drop_env_prefixes, request.keep_env)
        argv = self.ssh_argv("--", self.host, command)
        name = os.path.basename(request.argv[0])
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                argv,
                input=request.stdin,
                stdin=subprocess.DEVNULL if request.stdin is None else None,
                capture_output=True,
                timeout=request.timeout_seconds,
                check=False,
            )
        except FileNotFoundError:
            raise CommandMissing(
                f"ssh ({self.ssh!r}) is not installed here; install openssh-client to reach {self.host}"
            ) from None
        except subprocess.TimeoutExpired:
            raise NoAnswer(f"no reply from {self.host} within {request.timeout_seconds:g} s", delivered=True) from None
        seconds = time.perf_counter() - t0
        stdout, stderr = _decode(proc.stdout), _decode(proc.stderr)
        if proc.returncode == 255:
            raise self._ssh_failure(stderr)
        if proc.returncode == _COMMAND_MISSING and stderr.startswith("env: "):
            raise CommandMissing(f"{name!r} is not installed or not on PATH on {self.host}")
        return Reply(proc.returncode, stdout, stderr, seconds)

    def _ssh_failure(self, stderr: str) -> Exception:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        said = lines[-1] if lines else "ssh exited 255 with no message"
        for marker, what in _LOGIN_REFUSED:
            if marker in stderr:
                return SshLoginRefused(
                    self.host, f"ssh could not log in to {self.host} ({said}): {what.format(host=self.host)}"
                )
        delivered = not any(marker in stderr for marker in _NOT_CONNECTED)
        return NoAnswer(f"ssh to {self.host}: {said}", delivered=delivered)

    # ----------------------------------------------------------------- the master, for tests and benchmarks
    def master_pid(self) -> int | None:
        """The pid of the live master connection (``ssh -O check``), or None when there is none."""
        proc = subprocess.run(
            self.ssh_argv("-O", "check", self.host), capture_output=True, text=True, timeout=10, check=False
        )
        match = re.search(r"pid=(\d+)", proc.stderr + proc.stdout)
        return int(match[1]) if proc.returncode == 0 and match else None

    def close(self) -> None:
        """End the master connection now (``ssh -O exit``); the next command opens a new one."""
        subprocess.run(self.ssh_argv("-O", "exit", self.host), capture_output=True, timeout=10, check=False)
