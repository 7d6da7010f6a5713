"""Run outbox.contrib.django.emit's scenarios on this project's database; print what each
observed as JSON (tests/integration/test_emit_stacks_django.py asserts on it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.conf import settings as django_settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection, transaction
from django.middleware.csrf import get_token
from django.test import Client, RequestFactory, override_settings

from outbox import Event, Settings
from outbox.contrib.django import emit, emit_many

from ...models import Order


class Rollback(Exception):
    pass


def _outcome(step: Callable[[], Any]) -> str:
    try:
        step()
    except Exception as exc:  # reported to the test
        return type(exc).__name__
    return "ok"


def commit() -> dict[str, Any]:
    with transaction.atomic():
        Order.objects.create(number=1, total=Decimal("9.99"))
        one = emit(Event("order.placed", {"order": 1, "note": "50% off"}))
        many = emit_many([Event("order.placed", {"i": i}) for i in range(3)])
    return {"ids": [str(i) for i in [one, *many]]}


def rollback() -> dict[str, Any]:
    try:
        with transaction.atomic():
            emit(Event("order.placed", {"order": 2}))
            Order.objects.create(number=2, total=Decimal("1.00"))
            emit_many([Event("order.placed", {"i": i}) for i in range(3)])
            raise Rollback
    except Rollback:
        pass
    return {}


def savepoint() -> dict[str, Any]:
    """A nested atomic block (a savepoint) rolled back takes its emits with it; the outer
    block's commit."""
    with transaction.atomic():
        kept = [emit(Event("x", {"at": "outer"}))]
        try:
            with transaction.atomic():
                gone = [emit(Event("x", {"at": "inner"}))]
                gone += emit_many([Event("x", {"i": i}) for i in range(2)])
                Order.objects.create(number=3, total=Decimal("1.00"))
                raise Rollback
        except Rollback:
            pass
        kept.append(emit(Event("x", {"at": "after"})))
    return {"kept": [str(i) for i in kept], "gone": [str(i) for i in gone]}


def autocommit() -> dict[str, Any]:
    return {"emit": _outcome(lambda: emit(Event("x", {}))),
            "emit_many": _outcome(lambda: emit_many([Event("x", {}), Event("y", {})])),
            "sqlite": _outcome(lambda: emit(Event("x", {}), using="lite"))}


def invalid() -> dict[str, Any]:
    nowhere = Settings(schema_name="nosuch", max_payload_bytes=1024)
    with transaction.atomic():
        seen = [_outcome(lambda e=e: emit(e, settings=nowhere)) for e in (  # type: ignore[misc]
            Event("x", {"a": {1}}), Event("bad type", {}), Event("x", "y" * 2000))]
        seen.append(_outcome(lambda: emit_many([Event("ok", {}), Event("", {})],
                                               settings=nowhere)))
        emit(Event("ok", {}))  # the transaction is intact
    return {"outcomes": seen}


def catalog() -> dict[str, Any]:
    """invoice.paid is registered with a schema (the test did it): a payload that does not
    match is refused (its message naming the path), nothing written; a good one commits."""
    with transaction.atomic():
        seen = []
        for step in (lambda: emit(Event("invoice.paid", {"amount": "x"})),
                     lambda: emit_many([Event("invoice.paid", {"amount": 1}),
                                        Event("invoice.paid", {})])):
            try:
                step()
                seen.append("ok")
            except Exception as exc:  # reported to the test
                seen.append(f"{type(exc).__name__}: {exc}")
        emit(Event("invoice.paid", {"amount": 2}))
    return {"outcomes": seen}


def failed() -> dict[str, Any]:
    with transaction.atomic():
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT 1/0")
        except DatabaseError:
            pass
        seen = _outcome(lambda: emit(Event("x", {})))
        transaction.set_rollback(True)
    return {"emit": seen}


def idempotency() -> dict[str, Any]:
    with transaction.atomic():
        first = emit(Event("x", {}, idempotency_key="order-1"))
        same = emit(Event("x", {}, idempotency_key="order-1"))
    with transaction.atomic():
        batch = emit_many([Event("x", {}, idempotency_key="order-1"),
                           Event("x", {}, idempotency_key="order-2"),
                           Event("x", {}, idempotency_key="order-2")])
    return {"ids": [str(i) for i in [first, same, *batch]]}


def prepared() -> dict[str, Any]:
    eager = Settings(prepare_threshold=0)
    with transaction.atomic():
        ids = [emit(Event("x", {"n": i}), settings=eager) for i in range(3)]
        keyed = [emit(Event("x", {}, idempotency_key="k"), settings=eager) for _ in range(2)]
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'outbox_%%'",
                        [])
            (n,) = cur.fetchone()
    return {"ids": [str(i) for i in ids], "keyed": [str(i) for i in keyed], "prepared": n}


def server_binding() -> dict[str, Any]:
    """Django's ServerBindingCursor binds parameters server-side: outbox must not send it
    ``EXECUTE name ($1, ...)``; several emits in one atomic block and across blocks."""
    eager = Settings(prepare_threshold=0)
    ids = []
    for block in range(3):
        with transaction.atomic():
            Order.objects.create(number=10 + block, total=Decimal("1.00"))
            ids += [emit(Event("x", {"n": i}), settings=eager) for i in range(7)]
            ids += emit_many([Event("x", {"b": block}), Event("y", {})], settings=eager)
            ids.append(emit(Event("x", {}, idempotency_key=f"k{block}"), settings=eager))
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'outbox_%%'")
        (n,) = cur.fetchone()
    cursor = type(connection.cursor().cursor)
    return {"ids": [str(i) for i in ids], "outbox_prepared": n,
            "cursor": f"{cursor.__module__}.{cursor.__qualname__}"}


def project_settings() -> dict[str, Any]:
    big = Event("x", "y" * 5000)
    with transaction.atomic():
        refused = _outcome(lambda: emit(big))
        with override_settings(OUTBOX={"MAX_PAYLOAD_BYTES": 8192}):
            overridden = _outcome(lambda: emit(big))
        again = _outcome(lambda: emit(big))
    return {"refused": refused, "overridden": overridden, "again": again}


def view() -> dict[str, Any]:
    """The README's view as a normal project serves it (CsrfViewMiddleware on): a form's
    POST without the CSRF token is refused (and writes nothing), one with it is placed."""
    client = Client(enforce_csrf_checks=True)
    forged = client.post("/orders", {"number": "6", "total": "1.00"})
    form = RequestFactory().get("/orders/new")  # the page whose form has {% csrf_token %}
    token = get_token(form)
    client.cookies[django_settings.CSRF_COOKIE_NAME] = form.META["CSRF_COOKIE"]
    answer = client.post("/orders", {"number": "7", "total": "12.50",
                                     "csrfmiddlewaretoken": token})
    return {"forged": forged.status_code, "status": answer.status_code, "body": answer.json()}


def driver() -> dict[str, Any]:
    connection.ensure_connection()
    return {"module": type(connection.connection).__module__}


SCENARIOS = {f.__name__: f for f in (commit, rollback, savepoint, autocommit, invalid, catalog,
                                     failed,
                                     idempotency, prepared, server_binding, project_settings,
                                     view, driver)}


class Command(BaseCommand):
    help = "Run the named emit scenarios; print their observations as JSON."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))

    def handle(self, *args: Any, **options: Any) -> None:
        result = {name: SCENARIOS[name]() for name in options["scenarios"]}
        self.stdout.write(json.dumps(result))
