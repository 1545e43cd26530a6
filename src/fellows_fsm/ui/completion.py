"""``fellows-fsm completion bash|zsh|fish``: the shell's completion script, from click's own shell completion.

It prints a script for the user's shell to source; it never writes a shell's rc file.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from fellows_fsm.ui.app import main

__all__ = ["completion"]

_SHELLS = ("bash", "fish", "zsh")


@main.command(short_help="Print the shell completion script (bash, zsh, fish).")
@click.argument("shell", type=click.Choice(_SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL: commands, options, and file names where a command takes a file.

    \b
    bash:  eval "$(fellows-fsm completion bash)"    (in ~/.bashrc)
    zsh:   eval "$(fellows-fsm completion zsh)"     (in ~/.zshrc)
    fish:  fellows-fsm completion fish | source     (in ~/.config/fish/config.fish)
    """
    kind = get_completion_class(shell)
    assert kind is not None  # the choices are click's own shells
    click.echo(kind(main, {}, "fellows-fsm", "_FELLOWS_FSM_COMPLETE").source())
