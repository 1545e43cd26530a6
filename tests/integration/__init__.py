"""Integration tests against the real local SLURM (scripts/dev-slurm)."""
