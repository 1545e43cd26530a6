"""The ``fellows-fsm`` command line: the only module that prints or configures logging.

Every FellowsError becomes one line on stderr and its own exit code; ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from fellows_fsm import diagram as diagrams
from fellows_fsm.config import FellowsConfig
from fellows_fsm.errors import FellowsError

__all__ = ["main"]


class _Group(click.Group):
    """Turns our errors into one clear line and the error's exit code (tracebacks only with --debug)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except FellowsError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"fellows-fsm: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Dispatch GPU jobs to the fellows SLURM cluster, walking its QoS ladder before GCP."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@main.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["mermaid", "markdown"]),
    default="mermaid",
    show_default=True,
    help="mermaid: the diagram alone; markdown: the docs/state-diagram.md page.",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not stdout.")
def diagram(fmt: str, output: Path | None) -> None:
    """Draw the dispatch state diagram from the machine definition."""
    config = FellowsConfig(park_cap_seconds=600.0)
    text = diagrams.mermaid(config.ladder) if fmt == "mermaid" else diagrams.state_diagram_page(config)
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
