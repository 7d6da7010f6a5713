"""The worker's alerting numbers: due backlog, oldest due age, the largest tenant's share."""

from __future__ import annotations

import asyncio

import psycopg

import outbox
from outbox import Event
from outbox.delivery.store import Backlog, Store
from tests.support.workers import add_endpoint, settings


def _backlog(db_url: str) -> Backlog:
    async def read() -> Backlog:
        store = Store(settings(db_url))
        await store.open()
        try:
            return await store.backlog()
        finally:
            await store.close()
    return asyncio.run(read())


def test_largest_tenant_backlog_counts_the_busiest_tenants_due_rows(db_url: str) -> None:
    assert _backlog(db_url) == Backlog(0, 0.0, 0)
    add_endpoint(db_url, "https://example.com/all", all_tenants=True)
    with psycopg.connect(db_url) as c:
        outbox.emit_many(c, [Event("x", {}, tenant="acme")] * 5
                         + [Event("x", {}, tenant="globex")] * 3 + [Event("x", {})] * 2)
        c.commit()
    backlog = _backlog(db_url)
    assert (backlog.due, backlog.largest_tenant) == (10, 5)
    assert backlog.oldest_seconds >= 0
    with psycopg.connect(db_url, autocommit=True) as c:  # not due: not counted
        c.execute("UPDATE outbox.deliveries SET visible_at = now() + interval '1 hour'"
                  " WHERE event_id IN (SELECT id FROM outbox.events WHERE tenant = 'acme')")
    assert (_backlog(db_url).due, _backlog(db_url).largest_tenant) == (5, 3)
