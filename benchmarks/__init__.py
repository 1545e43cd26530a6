"""Benchmarks of fellows_fsm: each module is one command that writes ``benchmarks/results/<name>.json``."""
