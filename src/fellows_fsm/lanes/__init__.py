"""Lanes: where a job can run. The lane seam (base.py: what a lane can do, as plain values) and its kinds by
``kind`` (registry.py), one folder per kind that owns its table, its code and its fake (slurm/: a SLURM ladder;
command/: a command run once, and its process; gcp_batch/: one GCP Batch job per dispatch). The handoffs, the
clusters' fan-out and the admission check are the driver's (driver/).
"""
