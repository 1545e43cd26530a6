"""The scheduler port: its protocol and values, and the in-memory fake."""
