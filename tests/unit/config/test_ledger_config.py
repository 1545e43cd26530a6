"""The [ledger] table and [budget] scope: every bad value refused in one line naming it, a password never taken
from the config text and never shown, and without [ledger] everything as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.config.file import Config, config_mapping
from fellows_fsm.config.ledger import LedgerConfig, login_name, redact_dsn
from fellows_fsm.errors import ConfigError
from tests.unit.cli_helpers import run

URL = "postgresql://fellows@db.lab:5432/fellows"


def _refusal(table: dict[str, Any], **top: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"ledger": table, **top})
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_without_a_ledger_table_there_is_no_ledger_and_the_mapping_has_none() -> None:
    """No [ledger]: Config.ledger is None and the driver's mapping carries no ledger table (everything as today)."""
    config = Config.from_mapping({})
    assert config.ledger is None
    assert "ledger" not in config_mapping(config)
    assert config.budget.scope == "user"


def test_a_ledger_table_is_parsed_with_the_login_name_as_its_default_user() -> None:
    """url and team as given; user defaults to the login name; the mapping round-trips to the same ledger."""
    config = Config.from_mapping({"ledger": {"url": URL, "team": "lab"}, "budget": {"scope": "team"}})
    assert config.ledger == LedgerConfig(url=URL, team="lab", user=login_name())
    again = Config.from_mapping(config_mapping(config))
    assert again.ledger == config.ledger
    assert again.budget.scope == "team"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("postgresql://fellows:hunter2@db.lab/fellows", "has a password in it"),
        ("postgresql://fellows@db.lab/fellows?password=hunter2", "has a password in it"),
        ("mysql://fellows@db.lab/fellows", "must start with postgresql://"),
        ("postgresql://fellows@db.lab", "names no database"),
        ("postgresql:///fellows", "names no host"),
        ("postgresql://db.lab:99999/x", "is not a valid URL"),
        ("", "must be the ledger's address"),
    ],
    ids=["password", "password-query", "scheme", "no-db", "no-host", "bad-port", "empty"],
)
def test_a_bad_url_is_one_line_and_never_shows_a_password(url: str, words: str) -> None:
    """Each bad url: one line with these words, naming where a password belongs when one was there, never it."""
    message = _refusal({"url": url})
    assert words in message, message
    assert "hunter2" not in message
    if "password" in words:
        assert "PGPASSWORD, ~/.pgpass or [ledger] password_env" in message


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"url": URL, "password_env": "hunter2 is my password"}, "must be the NAME of an environment variable"),
        ({"url": URL, "team": "a lab"}, "[ledger] team='a lab' must be a short name"),
        ({"url": URL, "user": ""}, "[ledger] user='' must be a short name"),
        ({"url": URL, "machine": "gpu box"}, "[ledger] machine='gpu box' must be a short name"),
        ({"url": URL, "lease_seconds": 0}, "[ledger] lease_seconds=0 must be at least 1 seconds"),
        ({"url": URL, "connect_timeout_seconds": True}, "must be a number of seconds"),
        ({"url": URL, "tema": "lab"}, "unknown key 'tema' (did you mean 'team'?)"),
        ({"team": "lab"}, "[ledger] needs url"),
    ],
    ids=["password-env", "team", "user", "machine", "lease", "timeout", "unknown", "no-url"],
)
def test_each_bad_ledger_value_is_named(table: dict[str, Any], words: str) -> None:
    """Each bad key of [ledger]: one line naming it and its value."""
    assert words in _refusal(table)


def test_a_team_scope_needs_a_ledger_team_and_an_unknown_scope_is_refused() -> None:
    """[budget] scope = "team" without a [ledger] team is refused; a scope other than user or team too."""
    with pytest.raises(ConfigError, match=r"scope='team' needs a \[ledger\] with a team"):
        Config.from_mapping({"budget": {"scope": "team"}, "ledger": {"url": URL}})
    with pytest.raises(ConfigError, match=r"scope='lab' is not known"):
        Config.from_mapping({"budget": {"scope": "lab"}})


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (URL, URL),
        ("postgresql://fellows:hunter2@db.lab/fellows", "postgresql://fellows@db.lab/fellows"),
        ("postgres://db.lab:6543/x?sslmode=require&password=hunter2", "postgres://db.lab:6543/x?…"),
        ("http://fellows:hunter2@db.lab/x", "<an invalid URL>"),
    ],
    ids=["plain", "password", "query", "other-scheme"],
)
def test_the_url_is_shown_redacted(url: str, shown: str) -> None:
    """redact_dsn keeps scheme, role, host, port and database; a password or a query never."""
    assert redact_dsn(url) == shown


def test_password_env_is_read_at_use_and_an_unset_one_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """password() reads the variable password_env names when asked; unset, a ConfigError naming the variable (not a
    value); without password_env, None (libpq's PGPASSWORD or ~/.pgpass)."""
    ledger = LedgerConfig(url=URL, password_env="LEDGER_PW")
    monkeypatch.delenv("LEDGER_PW", raising=False)
    with pytest.raises(ConfigError, match=r"\$LEDGER_PW is not set"):
        ledger.password()
    monkeypatch.setenv("LEDGER_PW", "s3cret")
    assert ledger.password() == "s3cret"
    assert "s3cret" not in repr(ledger)
    assert LedgerConfig(url=URL).password() is None


def test_spend_with_a_scope_and_no_ledger_is_one_line_exit_3(tmp_path: Path) -> None:
    """``spend --scope user`` reads the shared ledger: with no [ledger] in the config, one line saying so, exit 3."""
    config = tmp_path / "fellows.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n', encoding="utf-8")
    result = run("--config", str(config), "spend", "--scope", "user")
    assert result.exit_code == 3
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "spend --scope user reads the shared ledger, and there is no [ledger]" in lines[0]
