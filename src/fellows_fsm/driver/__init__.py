"""The driver: the background process that walks every dispatch of a journal.

The router (the poll's cadence), the executor (the one doer), recovery, withdrawal, the inbox and the cache of the
cluster's workload.
"""
