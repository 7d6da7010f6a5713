"""A Flask view decorator for the inbox::

    @app.post("/hooks")
    @webhook_view(SECRET, lambda: psycopg.connect(URL))
    def hook(event: Received, conn: psycopg.Connection[Any]) -> str:
        conn.execute("INSERT INTO paid VALUES (%s)", (event.payload["invoice"],))
        return "ok"

Guarantees: a webhook that fails verification, or is not JSON, gets 400 before a database
connection is taken (nothing written); a duplicate gets 200 and the view is not called.
Otherwise the view runs inside a transaction on ``conn`` that already holds the webhook-id:
its writes and the id commit together, before the response is returned, when it answers
2xx; any other answer, or an exception, rolls everything back so the sender's retry is
processed afresh (a failed commit is an exception: 500).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import wraps
from typing import Any, Concatenate, ParamSpec

import psycopg
from flask import Response, make_response, request
from flask.typing import ResponseReturnValue

from outbox.errors import InvalidWebhook
from outbox.inbox import Received, Secrets, _secrets, record, verified

__all__ = ["webhook_view"]

P = ParamSpec("P")
ConnectionSource = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
"""``pool.connection`` (psycopg_pool) or ``lambda: psycopg.connect(url)``."""
WebhookView = Callable[Concatenate[Received, psycopg.Connection[Any], P], ResponseReturnValue]


def webhook_view(secret_or_secrets: Secrets, connection: ConnectionSource, *,
                 schema: str | None = None, source: str = "", tolerance_seconds: int = 300
                 ) -> Callable[[WebhookView[P]], Callable[P, Response]]:
    """Decorate ``view(event, conn, **url_values)`` (see the module)."""
    secrets = _secrets(secret_or_secrets)  # a malformed secret fails at import time

    def decorate(view: WebhookView[P]) -> Callable[P, Response]:
        @wraps(view)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> Response:
            try:
                event = verified(secrets, request.get_data(), dict(request.headers.items()),
                                 tolerance_seconds=tolerance_seconds)
            except InvalidWebhook as exc:
                return Response(str(exc), 400, mimetype="text/plain")
            with connection() as conn:
                with conn.transaction():
                    if not record(conn, event, schema=schema, source=source):
                        return Response("duplicate: already processed", 200,
                                        mimetype="text/plain")
                    response = make_response(view(event, conn, *args, **kwargs))
                    if not 200 <= response.status_code < 300:
                        raise psycopg.Rollback()
                return response

        return wrapper

    return decorate
