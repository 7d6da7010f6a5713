"""The demo: business writes + emit in transactions, a worker, a local signed receiver.

Everything is real: PostgreSQL (found or started), a Standard Webhooks receiver on
127.0.0.1 that verifies each signature, and the same worker loop ``outbox worker`` runs.
It uses its own schema (default ``outbox_demo``), recreated on every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import click
import psycopg
from psycopg.rows import class_row, scalar_row

import outbox
from outbox._db.connection import render
from outbox.admin import endpoints as ep
from outbox.admin.migrations import migrate
from outbox.delivery import queries
from outbox.delivery.runner import make_worker_transport
from outbox.delivery.settings import WorkerSettings
from outbox.delivery.worker import Worker
from outbox.signing import generate_secret
from outbox.testing.receiver import Behaviour, Received, Receiver


def _setup(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(render(queries.DEMO_DROP_SCHEMA, schema))
        migrate(conn, schema)
        conn.execute(render(queries.DEMO_CREATE_ORDERS, schema))


def _emit(url: str, schema: str, events: int) -> list[str]:
    """Each order is inserted and announced in ONE transaction; one is rolled back."""
    ids: list[str] = []
    insert = render(queries.DEMO_INSERT_ORDER, schema)
    with psycopg.connect(url) as conn:
        for n in range(events):
            with conn.transaction():
                conn.execute(insert, (n, 10 * n))
                kind = "invoice.paid" if n % 4 == 0 else "order.created"
                event = outbox.Event(kind, {"order": n, "total": 10 * n})
                ids.append(str(outbox.emit(conn, event, schema=schema)))
        with contextlib.suppress(_Rollback), conn.transaction():
            conn.execute(insert, (events, 0))
            outbox.emit(conn, outbox.Event("order.created", {"order": "rolled back"}),
                        schema=schema)
            raise _Rollback
    return ids


class _Rollback(Exception):
    pass


def _printer(start: float) -> Callable[[Received], None]:
    def show(r: Received) -> None:
        sig = {True: "signature ok", False: "BAD SIGNATURE", None: "unsigned"}[r.signature_ok]
        click.echo(f"  +{time.monotonic() - start:5.2f}s  {r.path:<7} {r.webhook_id}  "
                   f"{sig}  answered {r.answer}")
    return show


async def _deliver(settings: WorkerSettings, done: Callable[[], bool]) -> dict[str, int]:
    async with make_worker_transport(settings) as transport:
        worker = Worker(settings, transport)
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(done) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        worker.stop()
        await task
    return worker.stats


def run_demo(url: str, schema: str, events: int) -> None:
    """Set up, emit, deliver, and print what arrived and the delivery stats."""
    _setup(url, schema)
    secret = generate_secret()
    start = time.monotonic()
    with Receiver(secret=secret, on_receive=_printer(start)) as rx:
        rx.script("/flaky", [Behaviour(status=503), Behaviour(status=200)])
        with psycopg.connect(url, autocommit=True) as conn:
            ep.add(conn, rx.url + "/all", schema=schema, secret=secret)
            ep.add(conn, rx.url + "/flaky", schema=schema, secret=secret,
                   event_types=["invoice.paid"])
        click.echo(f"receiver on {rx.url} (endpoints /all and /flaky: invoice.paid only)")
        ids = _emit(url, schema, events)
        click.echo(f"emitted {len(ids)} events in {len(ids)} transactions "
                   "(+1 rolled back, never delivered); delivering:")
        settings = WorkerSettings(database_url=url, schema_name=schema,
                                  allow_networks="127.0.0.0/8", poll_interval_seconds=0.05,
                                  metrics_port=0,
                                  retry_base_seconds=0.5, retry_cap_seconds=1.0)
        stats = asyncio.run(_deliver(settings, lambda: _all_finished(url, schema)))
    _summary(url, schema, rx, stats)


def _all_finished(url: str, schema: str) -> bool:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=scalar_row) as cur:
        pending = cur.execute(render(queries.DEMO_PENDING, schema)).fetchone()
    return pending == 0


@dataclasses.dataclass(frozen=True, slots=True)
class _StateTotal:
    """Deliveries in one state and the attempts they took (``DEMO_SUMMARY``'s rows)."""

    state: str
    deliveries: int
    attempts: int


def _summary(url: str, schema: str, rx: Receiver, stats: dict[str, Any]) -> None:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=class_row(_StateTotal)) as cur:
        table = cur.execute(render(queries.DEMO_SUMMARY, schema)).fetchall()
    bad = len(rx.invalid_signatures())
    click.echo(f"\nreceived {len(rx.received)} requests for {len(rx.counts())} webhook-ids; "
               f"{bad} bad signatures")
    for row in table:
        click.echo(f"  {row.state:<10} {row.deliveries:>4} deliveries, {row.attempts} attempts")
    click.echo("worker: " + " ".join(f"{k}={v}" for k, v in stats.items()))
