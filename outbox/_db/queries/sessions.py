"""SQL of the web sessions' server-side end (outbox.admin.sessions)."""

from __future__ import annotations

SESSION_REVOKE = """
INSERT INTO {schema}.web_sessions_revoked (sid, expires_at)
VALUES (%(sid)s, to_timestamp(%(exp)s))
ON CONFLICT (sid) DO NOTHING
"""
SESSION_PRUNE = "DELETE FROM {schema}.web_sessions_revoked WHERE expires_at < now()"
SESSION_REVOKED = "SELECT EXISTS (SELECT 1 FROM {schema}.web_sessions_revoked WHERE sid = %s)"
