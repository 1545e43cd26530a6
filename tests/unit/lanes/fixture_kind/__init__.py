"""A third paid lane kind, written as a test fixture: one folder (kind.py), registered by one line."""
