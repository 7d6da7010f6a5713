"""Reading an endpoint's stored secrets, opened, for sending (``ping``) only: the signing
secrets, a broker URL's credentials, the credentials of its requests. Never for display:
nothing here is shown by the CLI, the API or the pages. Re-exported by
:mod:`outbox.admin.endpoints`."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._security.secretbox import SecretBox
from outbox.admin import _endpoint_auth as auth
from outbox.admin._endpoint_auth import DeliveryCredentials
from outbox.admin._endpoint_checks import parse_id
from outbox.errors import EndpointNotFound
from outbox.settings import get_settings


def signing_secrets(
    conn: psycopg.Connection[Any], endpoint_id: str | uuid.UUID, *, schema: str,
    box: SecretBox | None = None,
) -> list[str]:
    """The secrets that sign a request to this endpoint now: current first, then the
    previous one while its grace runs. For sending (``ping``) only: never display them."""
    row = _row(conn, queries.ENDPOINT_SIGNING_SECRETS, endpoint_id, schema)  # (current, previous)
    return [box_of(box).open(str(s)) for s in row if s]


def url_credentials(
    conn: psycopg.Connection[Any], endpoint_id: str | uuid.UUID, *, schema: str,
    box: SecretBox | None = None,
) -> str | None:
    """The opened ``user:pass`` of a broker endpoint's URL, None if it has none. For
    connecting (``ping``) only: never display them."""
    row = _row(conn, queries.ENDPOINT_CREDENTIALS, endpoint_id, schema)
    return box_of(box).open(str(row[0])) if row[0] else None


def delivery_credentials(
    conn: psycopg.Connection[Any], endpoint_id: str | uuid.UUID, *, schema: str,
    box: SecretBox | None = None,
) -> DeliveryCredentials:
    """The endpoint's secret headers, auth and TLS client certificate, opened. For sending
    (``ping``) only: never display them."""
    row = _row(conn, queries.ENDPOINT_AUTH_SECRETS, endpoint_id, schema)
    return auth.open_all(row, box_of(box))


def _row(conn: psycopg.Connection[Any], statement: str, endpoint_id: str | uuid.UUID,
         schema: str) -> tuple[Any, ...]:
    """The endpoint's row of ``statement`` (by id), or :class:`EndpointNotFound`."""
    eid = parse_id(endpoint_id)
    with translated(), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(render(statement, schema), (eid,))
        row = cur.fetchone()
    if row is None:
        raise EndpointNotFound(f"no endpoint {eid}")
    return row


def box_of(box: SecretBox | None) -> SecretBox:
    """``box``, else the configured ``OUTBOX_SECRET_KEY``'s."""
    return box if box is not None else get_settings().secret_box()
