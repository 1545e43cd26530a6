"""Lanes: where a job can run. The lane command, its process, the handoffs the driver runs, and the check of a
ladder against a cluster's grants.
"""
