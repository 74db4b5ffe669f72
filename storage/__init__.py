"""Durable bytes: the SQLite event log and session rows, and the plan sidecar files."""
