"""Where the config file is: ``--config``, else $FELLOWS_FSM_CONFIG, else ./fellows.toml, else the user's own
(``$XDG_CONFIG_HOME/fellows-fsm/config.toml``, ``~/.config/fellows-fsm/config.toml``).

It only looks at the environment and the file system (whether a file exists); it never reads or parses a config.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

__all__ = ["CONFIG_ENV", "LOCAL_CONFIG", "Found", "find_config", "user_config_path"]

CONFIG_ENV = "FELLOWS_FSM_CONFIG"
LOCAL_CONFIG = "fellows.toml"
"""The config of the current directory (a project's own), found before the user's."""


@attrs.frozen
class Found:
    """The config file a command uses, and how it was found (for messages): or none (the defaults)."""

    path: Path | None
    """The file (it may not exist when named by --config or the environment); None: no file, the defaults."""
    how: str
    """'--config', '$FELLOWS_FSM_CONFIG', './fellows.toml', 'the user config' or 'defaults'."""
    where: str
    """How an error names it: ``config file X`` or ``FELLOWS_FSM_CONFIG='X'``."""


def user_config_path() -> Path:
    """The user's own config: ``$XDG_CONFIG_HOME/fellows-fsm/config.toml``, else ``~/.config/fellows-fsm/...``."""
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    # The XDG spec: a relative $XDG_CONFIG_HOME is invalid and ignored.
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "fellows-fsm" / "config.toml"


def find_config(path: Path | str | None = None) -> Found:
    """The config a command uses: ``path`` (``--config``), $FELLOWS_FSM_CONFIG, ./fellows.toml, the user's own;
    the first that is given (the first two) or exists (the last two). None of them: the defaults."""
    if path is not None:
        return Found(Path(path), "--config", f"config file {path}")
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Found(Path(env), f"${CONFIG_ENV}", f"{CONFIG_ENV}={env!r}")
    local = Path(LOCAL_CONFIG)
    if local.exists():
        return Found(local, f"./{LOCAL_CONFIG}", f"config file {local}")
    user = user_config_path()
    if user.exists():
        return Found(user, "the user config", f"config file {user}")
    return Found(None, "defaults", "the defaults")
