"""SQL of the migrations (outbox.admin.migrations) and of the receiving side's inbox
(outbox.inbox)."""

from __future__ import annotations

# --- migrations -------------------------------------------------------------------------
MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
"""
CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"
SET_SEARCH_PATH = "SET LOCAL search_path TO {schema}, public"
# A statement that does nothing: a driver adapter that begins its transaction lazily
# (SQLAlchemy's asyncpg adapter, outbox.contrib.alembic) begins it now.
BEGIN_TRANSACTION = "SELECT 1"
# Saved before and restored after the migrations run in a caller's transaction.
SHOW_SEARCH_PATH = "SELECT current_setting('search_path')"
RESTORE_SEARCH_PATH = "SELECT set_config('search_path', %s, true)"
# `outbox migrate`'s first statement, before the lock (outbox.admin.migrations.migrate).
MIGRATION_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
# Two processes migrating the same schema at once: the second waits, then finds nothing to do.
MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext('outbox.admin.migrations'), hashtext(%s))"
MIGRATIONS_APPLIED = "SELECT version, name, checksum FROM {schema}.schema_migrations"
MIGRATION_RECORD = """
INSERT INTO {schema}.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)
"""

# --- inbox: the receiving side (outbox.inbox; migrations/inbox_*.sql) -------------------
# Recorded in the caller's transaction. A concurrent duplicate blocks on the first's
# uncommitted key until it commits (conflict: nothing inserted, no row returned) or rolls
# back (inserted: one row returned).
INBOX_RECORD = """
INSERT INTO {schema}.inbox (source, webhook_id) VALUES (%s, %s)
ON CONFLICT (source, webhook_id) DO NOTHING
RETURNING true
"""
# One short batch: the oldest rows received before the cutoff.
INBOX_PRUNE_BATCH = """
DELETE FROM {schema}.inbox i
 USING (SELECT source, webhook_id FROM {schema}.inbox
         WHERE received_at < %(cutoff)s ORDER BY received_at LIMIT %(limit)s) old
 WHERE i.source = old.source AND i.webhook_id = old.webhook_id
"""
# The inbox's own migrations (migrations/inbox_*.sql), recorded apart from outbox's: the
# same three statements as MIGRATIONS_TABLE, MIGRATIONS_APPLIED and MIGRATION_RECORD above,
# on {schema}.inbox_migrations.
INBOX_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.inbox_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
"""
INBOX_MIGRATIONS_APPLIED = "SELECT version, name, checksum FROM {schema}.inbox_migrations"
INBOX_MIGRATION_RECORD = """
INSERT INTO {schema}.inbox_migrations (version, name, checksum) VALUES (%s, %s, %s)
"""
