"""``python -m fellows_fsm``: the same command line as ``fellows-fsm``."""

from fellows_fsm.cli import main

main(prog_name="fellows-fsm")
