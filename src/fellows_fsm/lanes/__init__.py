"""Lanes: where a job can run. The lane seam (base.py) and its kinds by ``kind`` (registry.py), one module per
kind (slurm.py: the SLURM ladder; command.py: a command run once, process.py its process), the handoffs the
driver runs, and the check of a ladder against a cluster's grants.
"""
