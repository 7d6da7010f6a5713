"""The SQL function outbox.emit routes with the Python emit's own SQL text."""

from __future__ import annotations

import re

from outbox._db import queries
from outbox.admin.migrations import available


def test_latest_migration_defining_emit_holds_the_python_routing_verbatim() -> None:
    defining = [m for m in available()
                if re.search(r"CREATE OR REPLACE FUNCTION emit\(", m.sql)]
    assert defining, "no migration defines the SQL function emit"
    latest = defining[-1]
    assert queries.SQL_EMIT_STATEMENT in latest.sql, (
        f"migration {latest.version:04d}_{latest.name} no longer holds SQL_EMIT_STATEMENT: "
        "the routing SQL of outbox/_db/queries/emit.py changed; add a migration that "
        "redefines emit() with the new statement")


def test_the_statement_shares_the_routing_rule_with_the_python_statements() -> None:
    # the tenant scope and the wildcard filter, as the Python emit statements have them
    for piece in ("WHERE p.all_tenants AND p.enabled",
                  "starts_with(ins.type, left(f, -1))",
                  "CASE WHEN ep.ordered AND ins.key IS NOT NULL THEN 'fresh' ELSE 'pending'"):
        assert piece in queries.SQL_EMIT_STATEMENT
        assert piece in queries.EMIT_ONE
    assert "{schema}" not in queries.SQL_EMIT_STATEMENT
    assert "%%" not in queries.SQL_EMIT_STATEMENT
