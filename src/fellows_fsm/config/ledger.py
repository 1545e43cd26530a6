"""The ``[ledger]`` table: the shared ledger on PostgreSQL that one budget across machines and people is counted in
(src/fellows_fsm/ledger/), who this machine's user is there, and where the password comes from.

Every bad value is refused when the config is built, one line naming the key and the value. A password is never
taken from the config text (a URL with one is refused): it comes from ``PGPASSWORD``, ``~/.pgpass`` (libpq reads
both) or the variable ``password_env`` names. The URL is only ever shown through ``redact_dsn``.
"""

from __future__ import annotations

import getpass
import math
import os
import re
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs

from fellows_fsm.errors import ConfigError
from fellows_fsm.tables import refuse_unknown_keys

__all__ = ["DEFAULT_LEASE_SECONDS", "LedgerConfig", "login_name", "redact_dsn"]

DEFAULT_LEASE_SECONDS = 1800.0
"""How long a reservation not yet marked created holds its room without its driver renewing it (each tick)."""

_SCHEMES = ("postgresql", "postgres")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+:-]{0,254}")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_FIX = "give the password through PGPASSWORD, ~/.pgpass or [ledger] password_env (the name of a variable)"


def login_name() -> str:
    """This user's login name (the ledger's default ``user``)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER: the uid still names someone
        return f"uid{os.getuid()}"


def redact_dsn(url: str) -> str:
    """A ledger URL as it may be shown: scheme, role, host, port and database; a password or query never."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        host = parts.hostname or ""
    except ValueError:
        return "<an invalid URL>"
    if parts.scheme not in _SCHEMES:
        return "<an invalid URL>"
    role = f"{parts.username}@" if parts.username else ""
    query = "?…" if parts.query else ""
    return f"{parts.scheme}://{role}{host}{port}{parts.path}{query}"


def _check_url(url: object) -> None:
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(
            "[ledger] url must be the ledger's address as a string, such as 'postgresql://fellows@db.lab:5432/fellows'"
        )
    shown = redact_dsn(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError:
        raise ConfigError(f"[ledger] url={shown} is not a valid URL; use 'postgresql://user@host:port/db'") from None
    if parts.scheme not in _SCHEMES:
        raise ConfigError(f"[ledger] url={shown} must start with postgresql://, e.g. 'postgresql://user@host:5432/db'")
    if parts.password is not None or any(k.lower() == "password" for k, _ in parse_qsl(parts.query)):
        raise ConfigError(f"[ledger] url={shown} has a password in it: remove it from the config and {_FIX}")
    if not parts.hostname:
        raise ConfigError(f"[ledger] url={shown} names no host; use 'postgresql://user@host:port/db'")
    if parts.path in ("", "/"):
        raise ConfigError(f"[ledger] url={shown} names no database; use 'postgresql://user@host:port/db'")


@attrs.frozen(kw_only=True)
class LedgerConfig:
    """The ``[ledger]`` table (absent: None in Config, everything counted on the local journal as before)."""

    url: str
    """The PostgreSQL server and database, ``postgresql://role@host:port/db``, never with a password in it."""
    team: str | None = None
    """The team this user's spending is shared with (``[budget] scope = "team"`` needs one); None: no team."""
    user: str = attrs.field(factory=login_name)
    """Who spends, in the ledger's rows (default: this machine's login name; one person's machines share it)."""
    machine: str = attrs.field(factory=socket.gethostname)
    """This machine's name in the ledger's rows (default: its host name). A reservation is this machine's and this
    journal's: two machines that share a name and a state dir path must be told apart here."""
    password_env: str | None = None
    """The name of an environment variable holding the password (None: libpq's PGPASSWORD or ~/.pgpass)."""
    connect_timeout_seconds: float = 5.0
    """How long a connection may take before the ledger counts as unreachable (a whole second at least: libpq)."""
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    """How long a reservation not yet marked created lasts without its driver renewing it."""

    def __attrs_post_init__(self) -> None:
        _check_url(self.url)
        for key in ("team", "user", "machine"):
            value = getattr(self, key)
            if value is None and key == "team":
                continue
            if key == "machine" and isinstance(value, str) and _HOST.fullmatch(value):
                continue  # a host name may be a long FQDN
            if not isinstance(value, str) or not _NAME.fullmatch(value):
                raise ConfigError(
                    f"[ledger] {key}={value!r} must be a short name (letters, digits, '.', '_', '@', '+', '-'; "
                    "at most 64)"
                )
        if self.password_env is not None and (
            not isinstance(self.password_env, str) or not _ENV.fullmatch(self.password_env)
        ):
            raise ConfigError(
                f"[ledger] password_env={self.password_env!r} must be the NAME of an environment variable (such as "
                "'FELLOWS_LEDGER_PASSWORD'), never the password itself"
            )
        for key, low in (("connect_timeout_seconds", 1.0), ("lease_seconds", 1.0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"[ledger] {key}={value!r} must be a number of seconds")
            if value < low:
                raise ConfigError(f"[ledger] {key}={value!r} must be at least {low:g} seconds")

    @property
    def shown(self) -> str:
        """The URL as it may be shown (``redact_dsn``)."""
        return redact_dsn(self.url)

    def password(self) -> str | None:
        """The password from ``password_env`` (None: libpq finds it in PGPASSWORD or ~/.pgpass, or none is
        needed); ConfigError when that variable is unset or empty."""
        if self.password_env is None:
            return None
        value = os.environ.get(self.password_env)
        if not value:
            raise ConfigError(
                f"[ledger] password_env={self.password_env!r}, but ${self.password_env} is not set here; set it, or "
                "remove password_env and use PGPASSWORD or ~/.pgpass"
            )
        return value

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> LedgerConfig:
        """The ledger of a ``[ledger]`` table; ConfigError naming the key if one is unknown, missing or bad."""
        refuse_unknown_keys("[ledger]", table, (a.name for a in attrs.fields(cls)))
        if "url" not in table:
            raise ConfigError("[ledger] needs url = 'postgresql://user@host:port/db' (the shared ledger's database)")
        return cls(**dict(table))

    def table(self) -> dict[str, Any]:
        """The ``[ledger]`` table (every key; the user resolved), what the background driver is given."""
        return {a.name: getattr(self, a.name) for a in attrs.fields(type(self))}
