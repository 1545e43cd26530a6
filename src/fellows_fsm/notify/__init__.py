"""Telling the user: the outbox's events sent to webhooks, Slack and command sinks by a thread of the driver
(sender.py), and the Prometheus metrics (metrics.py)."""
