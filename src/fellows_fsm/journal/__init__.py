"""The journal: the SQLite store and the only code that writes SQL.

Its schema, the driver lock, the state dir's filesystem check, a dispatch's steps and the queries the views use.
"""
