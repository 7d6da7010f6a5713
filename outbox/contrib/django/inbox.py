"""A Django view decorator for the inbox (Django 4.2+ with psycopg 3)::

    @webhook_view(SECRET)
    def hook(request: HttpRequest, event: Received) -> HttpResponse:
        Payment.objects.create(invoice=event.payload["invoice"])
        return HttpResponse("ok")

Guarantees: a webhook that fails verification, or is not JSON, gets 400 and the view is
not called (nothing written); a duplicate gets 200 and the view is not called. Otherwise
the view runs inside ``transaction.atomic(using=using)``, which already holds the
webhook-id: its ORM writes and the id commit together when it returns a 2xx response; any
other response, or an exception, rolls everything back so the sender's retry is processed
afresh. The commit happens before the response leaves the view (a failed commit is an
exception: 500). The view is CSRF-exempt (webhooks are authenticated by their signature).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, ParamSpec

import psycopg
from django.db import connections, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from outbox.errors import ConfigurationError, InvalidWebhook
from outbox.inbox import Received, Secrets, _secrets, record, verified

__all__ = ["webhook_view"]

P = ParamSpec("P")
View = Callable[Concatenate[HttpRequest, P], HttpResponseBase]
WebhookView = Callable[Concatenate[HttpRequest, Received, P], HttpResponseBase]


def _psycopg(using: str) -> psycopg.Connection[Any]:
    """The psycopg 3 connection under Django's connection ``using`` (inside atomic)."""
    wrapper = connections[using]
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise ConfigurationError(
            f"database {using!r} is not on psycopg 3: outbox.contrib.django needs Django's "
            "postgresql backend with psycopg (3) installed")
    return raw


def webhook_view(secret_or_secrets: Secrets, *, using: str = "default",
                 schema: str | None = None, source: str = "",
                 tolerance_seconds: int = 300) -> Callable[[WebhookView[P]], View[P]]:
    """Decorate ``view(request, event, *args, **kwargs)`` (see the module)."""
    secrets = _secrets(secret_or_secrets)  # a malformed secret fails at import time

    def decorate(view: WebhookView[P]) -> View[P]:
        @wraps(view)
        def wrapper(request: HttpRequest, /, *args: P.args,
                    **kwargs: P.kwargs) -> HttpResponseBase:
            try:
                event = verified(secrets, request.body, request.headers,
                                 tolerance_seconds=tolerance_seconds)
            except InvalidWebhook as exc:
                return HttpResponseBadRequest(str(exc), content_type="text/plain")
            with transaction.atomic(using=using):
                if not record(_psycopg(using), event, schema=schema, source=source):
                    return HttpResponse("duplicate: already processed",
                                        content_type="text/plain")
                response = view(request, event, *args, **kwargs)
                if not 200 <= response.status_code < 300:
                    transaction.set_rollback(True, using=using)
                return response

        return csrf_exempt(wrapper)

    return decorate
