"""SQL of table capture (outbox.admin.capture): calls of the functions and the view of
migrations/0011_sql_emit.sql, which hold the logic (so psql, Alembic and Django run the
same checks)."""

from __future__ import annotations

# The table as PostgreSQL resolves the caller's name (search_path), or NULL.
CAPTURE_TABLE = "SELECT to_regclass(%s)::text"
# {call}: CAPTURE_ADD_CALL with literal arguments (outbox.admin.capture.add_statement).
CAPTURE_ADD_CALL = "SELECT {schema}.capture_add({table}, {type}, {key}, {tenant}, {ops}, {columns})"
CAPTURE_REMOVE = "SELECT {schema}.capture_remove(%s::regclass)"
# The same with a literal table (outbox.admin.capture.remove_statement).
CAPTURE_REMOVE_CALL = "SELECT {schema}.capture_remove({table})"
CAPTURE_LIST = "SELECT tbl::text, config::text FROM {schema}.captures ORDER BY tbl::text"
