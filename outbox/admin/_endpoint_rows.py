"""Reading an endpoint's row as an :class:`~outbox.admin.endpoints.Endpoint`: the row one
statement returns (:func:`one`), one endpoint by id (:func:`get`, re-exported by
:mod:`outbox.admin.endpoints`), and ``update``'s OAuth2 parameters, checked against the
row as it will be (:func:`update_oauth2`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg.rows import class_row

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._security.secretbox import SecretBox
from outbox._security.ssrf import IPNetwork
from outbox.admin._endpoint_checks import parse_id
from outbox.admin._endpoint_secrets import box_of
from outbox.admin._endpoint_types import Endpoint
from outbox.admin.endpoint_oauth2 import OAuth2Options, oauth2_params
from outbox.errors import EndpointNotFound

# The ENDPOINT_* queries return queries.ENDPOINT_COLUMNS: Endpoint's fields, by name.
ENDPOINT_ROW = class_row(Endpoint)


def one(conn: psycopg.Connection[Any], statement: str, schema: str,
        params: Mapping[str, Any] | tuple[Any, ...]) -> Endpoint | None:
    """The endpoint row ``statement`` returns, None if none."""
    with translated(), conn.cursor(row_factory=ENDPOINT_ROW) as cur:
        cur.execute(render(statement, schema), params)
        return cur.fetchone()


def get(conn: psycopg.Connection[Any], endpoint_id: str | uuid.UUID, *, schema: str) -> Endpoint:
    """One endpoint, or :class:`EndpointNotFound`."""
    eid = parse_id(endpoint_id)
    row = one(conn, queries.ENDPOINT_GET, schema, (eid,))
    if row is None:
        raise EndpointNotFound(f"no endpoint {eid}")
    return row


def update_oauth2(conn: psycopg.Connection[Any], eid: uuid.UUID, schema: str,
                  oauth2: OAuth2Options | None, clear: bool, *, url: str | None,
                  headers: Mapping[str, str] | None, clear_headers: bool,
                  box: SecretBox | None, allow_networks: Sequence[IPNetwork] | None,
                  ) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``update``'s OAuth2 parameters, checked against the endpoint as it will be."""
    if not clear and (oauth2 is None or not oauth2.given()) and not headers and url is None:
        return oauth2_params(None, box=box_of(box), url=None, headers=None)
    current = get(conn, eid, schema=schema)
    merged = {**({} if clear_headers else current.headers), **(headers or {})}
    return oauth2_params(oauth2, box=box_of(box), url=url or current.url, headers=merged,
                         current=current.oauth2_token_url is not None, clear=clear,
                         allow_networks=allow_networks)
