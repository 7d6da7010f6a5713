"""The receiving side: turn at-least-once webhook delivery into exactly-once effects.

``receive(conn, secret, body, headers)`` verifies a Standard Webhooks request with exactly
the rules of :func:`outbox.verify` (any of several secrets, the same timestamp tolerance),
then records its ``webhook-id`` in the ``inbox`` table *in the caller's transaction* and
returns the parsed event, or ``None`` when that id was already processed. The caller does
its business write in the same transaction, so the effect and the dedupe record commit
together (``outbox migrate --inbox`` creates the table).

Guarantees:

- Commit of the caller's transaction: the effect happened and the id is recorded; every
  later delivery of that id returns ``None``. Rollback (an exception, a crash, a lost
  connection before commit): neither happened, and the sender's retry is processed afresh.
  A crash *after* the commit but before the HTTP answer reached the sender makes it retry:
  that retry returns ``None`` (answer 2xx), so the effect happens exactly once.
- Concurrent duplicates: a second transaction receiving the same id blocks on the first's
  uncommitted row (the primary key) until it ends. First committed: the second gets
  ``None``. First rolled back: the second gets the event and proceeds. Exactly one proceeds.
- Refused before any SQL runs, nothing written, the transaction untouched:
  :class:`~outbox.errors.InvalidSignature` (bad or missing signature, stale or future
  timestamp, missing headers, body not UTF-8), :class:`~outbox.errors.MalformedWebhook`
  (correctly signed but the body is not JSON, or the ``webhook-id`` is over 256
  characters), :class:`~outbox.errors.InvalidEndpoint` (a malformed secret: a
  configuration error). Both webhook errors derive from
  :class:`~outbox.errors.InvalidWebhook`: answer 400.
- Outbox never commits, rolls back or opens a transaction on ``conn``. An autocommit
  connection outside ``conn.transaction()`` (or a failed transaction) raises
  :class:`~outbox.errors.NotInTransaction` before any SQL: the id must never commit without
  the effect. A database error aborts the caller's transaction, as any failed statement does.

Retention: :func:`prune` deletes ids older than a window that must exceed the sender's
retry horizon (default 72 h): an id pruned earlier could arrive again and be processed
twice. Replays of a captured request are no concern: a signed timestamp older than the
tolerance (5 minutes) is refused anyway.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import scalar_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox.errors import (
    InvalidEndpoint,
    InvalidSignature,
    MalformedWebhook,
    NotInTransaction,
    OperationRefused,
    SchemaMissing,
)
from outbox.settings import get_settings
from outbox.signing import check_key, verify

__all__ = [
    "MAX_WEBHOOK_ID_LENGTH",
    "SENDER_RETRY_HORIZON",
    "InboxPruneResult",
    "Received",
    "check_window",
    "prune",
    "receive",
    "receive_async",
    "record",
    "record_async",
    "verified",
]

MAX_WEBHOOK_ID_LENGTH = 256
MAX_SOURCE_LENGTH = 128
SENDER_RETRY_HORIZON = dt.timedelta(hours=72)
"""The shortest retention :func:`prune` accepts without ``force``: the sender's maximum
retry horizon (outbox's default schedule retries for at most 48.5 h; 72 h leaves room for
a slower schedule and an operator's replay)."""

Secrets = str | Sequence[str]


@dataclass(frozen=True, slots=True)
class Received:
    """A verified webhook seen for the first time: its ``webhook-id``, the signed
    ``webhook-timestamp`` (unix seconds), the parsed JSON ``payload`` and the raw ``body``."""

    webhook_id: str
    timestamp: int
    payload: Any
    body: bytes


def _secrets(secret_or_secrets: Secrets) -> list[str]:
    secrets = [secret_or_secrets] if isinstance(secret_or_secrets, str) else list(
        secret_or_secrets)
    if not secrets:
        raise InvalidEndpoint("at least one webhook secret is required to verify")
    for secret in secrets:
        check_key(secret)  # a malformed secret or public key: a configuration error, first
    return secrets


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _header(headers: Mapping[str, str], name: str) -> str:
    found = ""
    for key, value in headers.items():
        if key.lower() == name:
            found = value  # the last one wins, as in verify
    return found


def verified(secret_or_secrets: Secrets, body: bytes | str, headers: Mapping[str, str], *,
             tolerance_seconds: int = 300, now: float | None = None) -> Received:
    """Verify and parse a webhook without recording it (no SQL): what :func:`receive`
    checks first. Raises :class:`~outbox.errors.InvalidWebhook` subclasses (see module)."""
    secrets = _secrets(secret_or_secrets)
    first: InvalidSignature | None = None
    for secret in secrets:
        try:
            verify(secret, body, headers, tolerance_seconds=tolerance_seconds, now=now)
            break
        except InvalidSignature as exc:
            first = first or exc
    else:
        assert first is not None
        raise first
    raw = body.encode() if isinstance(body, str) else body
    webhook_id = _header(headers, "webhook-id")
    if len(webhook_id) > MAX_WEBHOOK_ID_LENGTH or "\x00" in webhook_id:
        raise MalformedWebhook(
            f"webhook-id is longer than {MAX_WEBHOOK_ID_LENGTH} characters or has a NUL")
    try:
        payload = json.loads(raw, parse_constant=_refuse_constant)
    except ValueError:
        raise MalformedWebhook("webhook body is not JSON") from None
    except RecursionError:
        raise MalformedWebhook("webhook body is JSON nested too deeply to parse") from None
    timestamp = int(float(_header(headers, "webhook-timestamp")))
    return Received(webhook_id, timestamp, payload, raw)


def _check_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    status = conn.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise NotInTransaction(
            "the connection's transaction has failed: roll back before receiving")
    if conn.autocommit and status == TransactionStatus.IDLE:
        raise NotInTransaction(
            "connection is in autocommit mode outside a transaction: receive inside "
            "`with conn.transaction():` so the webhook-id commits with your own writes")


def _plan(source: str, schema: str | None) -> str:
    if not isinstance(source, str) or len(source) > MAX_SOURCE_LENGTH or "\x00" in source:
        raise ValueError(f"source must be a str of at most {MAX_SOURCE_LENGTH} characters")
    return render(queries.INBOX_RECORD, schema or get_settings().schema_name)


def _missing(exc: SchemaMissing) -> SchemaMissing:
    return SchemaMissing(f"{exc}; for the inbox table: run `outbox migrate --inbox`")


def record(conn: psycopg.Connection[Any], event: Received, *, schema: str | None = None,
           source: str = "") -> bool:
    """Record ``event``'s id in the caller's transaction: True when it is new (process it),
    False when it was already processed. The second half of :func:`receive`, for callers
    that verified with :func:`verified` first (e.g. to refuse bad requests before taking a
    database connection); the same transaction rules and guarantees."""
    query = _plan(source, schema)
    _check_transaction(conn)
    try:
        with translated(), conn.cursor(row_factory=scalar_row) as cur:
            return bool(cur.execute(query, (source, event.webhook_id)).fetchone())
    except SchemaMissing as exc:
        raise _missing(exc) from exc


async def record_async(conn: psycopg.AsyncConnection[Any], event: Received, *,
                       schema: str | None = None, source: str = "") -> bool:
    """:func:`record` for a psycopg ``AsyncConnection``; the same guarantees."""
    query = _plan(source, schema)
    _check_transaction(conn)
    try:
        with translated():
            async with conn.cursor(row_factory=scalar_row) as cur:
                await cur.execute(query, (source, event.webhook_id))
                return bool(await cur.fetchone())
    except SchemaMissing as exc:
        raise _missing(exc) from exc


def receive(
    conn: psycopg.Connection[Any],
    secret_or_secrets: Secrets,
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    schema: str | None = None,
    source: str = "",
    tolerance_seconds: int = 300,
    now: float | None = None,
) -> Received | None:
    """Verify the webhook and record its id in the caller's transaction; return the event
    when it is new, ``None`` when that id was already processed (see the module's
    guarantees). Pass ``body`` as the raw request bytes, before any JSON parsing.

    ``source`` namespaces ids (e.g. one per sender whose ids might collide); ``schema``
    defaults to ``OUTBOX_SCHEMA``. A duplicate that is still being processed by another
    transaction makes this call wait for that transaction to end.
    """
    _plan(source, schema)  # a bad source is refused before anything else
    event = verified(secret_or_secrets, body, headers, tolerance_seconds=tolerance_seconds,
                     now=now)
    return event if record(conn, event, schema=schema, source=source) else None


async def receive_async(
    conn: psycopg.AsyncConnection[Any],
    secret_or_secrets: Secrets,
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    schema: str | None = None,
    source: str = "",
    tolerance_seconds: int = 300,
    now: float | None = None,
) -> Received | None:
    """:func:`receive` for a psycopg ``AsyncConnection``; the same guarantees."""
    _plan(source, schema)
    event = verified(secret_or_secrets, body, headers, tolerance_seconds=tolerance_seconds,
                     now=now)
    return event if await record_async(conn, event, schema=schema, source=source) else None


@dataclass(frozen=True, slots=True)
class InboxPruneResult:
    """How many inbox ids were deleted, and the cutoff (ids received before it went)."""

    cutoff: dt.datetime
    deleted: int


def check_window(older_than: dt.timedelta, *, force: bool = False) -> None:
    """Refuse (:class:`~outbox.errors.OperationRefused`) a retention window shorter than
    :data:`SENDER_RETRY_HORIZON` unless ``force``, saying why."""
    if older_than < dt.timedelta(0):
        raise ValueError("older_than must not be negative")
    if older_than < SENDER_RETRY_HORIZON and not force:
        hours = older_than.total_seconds() / 3600
        raise OperationRefused(
            f"refusing to prune inbox ids younger than {SENDER_RETRY_HORIZON.days * 24} h "
            f"(asked: {hours:g} h): the sender may retry a webhook for up to 72 h, and an id "
            "pruned before its last retry would be processed a second time. Use --force "
            "(force=True) only if your sender's retry horizon is shorter than the window")


def prune(conn: psycopg.Connection[Any], schema: str, older_than: dt.timedelta, *,
          force: bool = False, batch_size: int = 10_000) -> InboxPruneResult:
    """Delete inbox ids received more than ``older_than`` ago, oldest first, in short
    transactions of ``batch_size`` rows (interrupting loses nothing; running again goes
    on). The cutoff comes from the database clock, once. ``conn`` must not be inside a
    transaction. A window under :data:`SENDER_RETRY_HORIZON` is refused without ``force``
    (nothing read or deleted)."""
    check_window(older_than, force=force)
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise OperationRefused("prune commits batch by batch: run it outside a transaction")
    try:
        with translated(), conn.transaction(), conn.cursor(row_factory=scalar_row) as cur:
            cutoff: dt.datetime | None = cur.execute(
                queries.PRUNE_CUTOFF, (older_than.total_seconds(),)).fetchone()
        assert cutoff is not None
        sql = render(queries.INBOX_PRUNE_BATCH, schema)
        deleted = 0
        while True:
            with translated(), conn.transaction(), conn.cursor() as cur:
                batch = cur.execute(sql, {"cutoff": cutoff, "limit": batch_size}).rowcount
            deleted += batch
            if batch < batch_size:
                return InboxPruneResult(cutoff, deleted)
    except SchemaMissing as exc:
        raise _missing(exc) from exc
