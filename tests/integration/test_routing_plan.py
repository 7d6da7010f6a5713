"""Fan-out reads only the event's tenant's endpoints, by index, however many there are."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from outbox._db import queries
from outbox._db.connection import render
from tests.support.pg import SCHEMA

TENANTS = 5_000


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _plan(conn: psycopg.Connection[Any], query: str, params: Any) -> list[dict[str, Any]]:
    row = conn.execute(("EXPLAIN (FORMAT JSON) " + render(query, SCHEMA)).encode(),
                       params).fetchone()
    assert row is not None
    raw = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return list(_nodes(raw[0]["Plan"]))


def _endpoint_scans(nodes: list[dict[str, Any]]) -> list[str]:
    """How each read of endpoints is done: 'Index Scan', 'Bitmap Heap Scan', 'Seq Scan'..."""
    return [n["Node Type"] for n in nodes if n.get("Relation Name") == "endpoints"]


def _indexes(nodes: list[dict[str, Any]]) -> set[str]:
    return {n["Index Name"] for n in nodes if "Index Name" in n}


@pytest.fixture
def many_endpoints(db_url: str) -> str:
    """Two endpoints for each of TENANTS tenants, a few tenant-less and all-tenants ones."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(b"""
            INSERT INTO outbox.endpoints (id, url, secret, tenant, event_types)
            SELECT gen_random_uuid(), 'https://example.com/' || i, 'whsec_x',
                   't' || (i %% %s), CASE WHEN i %% 2 = 0 THEN '{invoice.*}'::text[] END
              FROM generate_series(1, %s) i""", (TENANTS, 2 * TENANTS))
        c.execute("INSERT INTO outbox.endpoints (id, url, secret) SELECT gen_random_uuid(),"
                  " 'https://example.com/none', 'whsec_x' FROM generate_series(1, 3)")
        c.execute("INSERT INTO outbox.endpoints (id, url, secret, all_tenants) VALUES"
                  " (gen_random_uuid(), 'https://example.com/all', 'whsec_x', true)")
        c.execute("ANALYZE outbox.endpoints")
    return db_url


@pytest.mark.parametrize("tenant", ["t42", None], ids=["tenant", "tenant-less"])
def test_emit_reads_endpoints_by_index(many_endpoints: str, tenant: str | None) -> None:
    params = (uuid.uuid4(), "invoice.paid", "{}", None, None, tenant)
    with psycopg.connect(many_endpoints) as c:
        nodes = _plan(c, queries.EMIT_ONE, params)
    scans = _endpoint_scans(nodes)
    assert scans and "Seq Scan" not in scans, scans
    assert {"endpoints_by_tenant", "endpoints_all_tenants"} <= _indexes(nodes)


def test_emit_many_routes_read_endpoints_by_index(many_endpoints: str) -> None:
    params = {"types": ["invoice.paid"] * 100, "tenants": [f"t{i}" for i in range(100)]}
    with psycopg.connect(many_endpoints) as c:
        scans = _endpoint_scans(_plan(c, queries.ROUTES, params))
    assert scans and "Seq Scan" not in scans, scans


def test_the_check_catches_a_scan(many_endpoints: str) -> None:
    """Without the tenant index the same statement scans endpoints, and the check says so."""
    params = (uuid.uuid4(), "invoice.paid", "{}", None, None, "t42")
    with psycopg.connect(many_endpoints) as c:
        c.execute("DROP INDEX outbox.endpoints_by_tenant")
        scans = _endpoint_scans(_plan(c, queries.EMIT_ONE, params))
        c.rollback()
    assert "Seq Scan" in scans, scans
