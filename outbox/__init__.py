"""outbox: transactional outbox and signed webhook delivery on PostgreSQL.

Emit inside your own transaction::

    with conn.transaction():
        conn.execute("INSERT INTO invoices ...")
        outbox.emit(conn, outbox.Event(type="invoice.paid", payload={"id": 42}))

``conn`` may also be a psycopg2 connection or cursor or a SQLAlchemy session (``emit``),
an asyncpg connection or a SQLAlchemy async session (``emit_async``); in Django,
``outbox.contrib.django.emit(event)`` inside ``transaction.atomic()``.

Importing ``outbox`` never imports the worker's dependencies (httpx and friends).
"""

from outbox._emit.api import emit, emit_async, emit_many, emit_many_async
from outbox._emit.event import Event
from outbox.errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseUnavailable,
    DeliveryNotFound,
    EndpointNotFound,
    InvalidEndpoint,
    InvalidEvent,
    InvalidSignature,
    InvalidWebhook,
    MalformedWebhook,
    MigrationError,
    NotInTransaction,
    OperationRefused,
    OutboxError,
    SchemaMissing,
)
from outbox.settings import Settings, get_settings
from outbox.signing import generate_secret, verify

__all__ = [
    "ConfigurationError",
    "DatabaseError",
    "DatabaseUnavailable",
    "DeliveryNotFound",
    "EndpointNotFound",
    "Event",
    "InvalidEndpoint",
    "InvalidEvent",
    "InvalidSignature",
    "InvalidWebhook",
    "MalformedWebhook",
    "MigrationError",
    "NotInTransaction",
    "OperationRefused",
    "OutboxError",
    "SchemaMissing",
    "Settings",
    "emit",
    "emit_async",
    "emit_many",
    "emit_many_async",
    "generate_secret",
    "get_settings",
    "verify",
]
