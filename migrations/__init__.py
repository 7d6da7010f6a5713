"""Numbered plain-SQL migrations: the only source of the outbox schema (shipped in the wheel)."""
