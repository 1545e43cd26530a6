"""The driver: the background process that walks every dispatch of a journal.

The router (the poll's cadence), the executor (the one doer), the roster (the dispatches it drives), recovery,
withdrawal, the inbox (every message a command leaves for the driver) and the cache of the cluster's workload.
"""
