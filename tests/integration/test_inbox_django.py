"""outbox.contrib.django with Django's own test Client, on real PostgreSQL (psycopg 3).

Django is configured here, once per process, from tests/support/django_settings.py plus a
receiver database made for this module; this module is also the URLconf.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import django
import pytest
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import Client
from django.urls import path

from outbox.contrib.django import webhook_view
from outbox.inbox import Received
from tests.support import django_settings, pg
from tests.support.inbox import SECRET, bad_requests, prepare_receiver_db, signed, written

CALLS: list[Any] = []


@webhook_view(SECRET, schema=pg.SCHEMA)
def hook(request: HttpRequest, event: Received) -> HttpResponse:
    CALLS.append(event.payload)
    with connection.cursor() as cur:  # Django's connection, in the helper's atomic block
        cur.execute("INSERT INTO effects VALUES (%s, %s)",
                    [event.webhook_id, event.body.decode()])
        action = event.payload.get("action")
        if action == "fail at commit":
            cur.execute("INSERT INTO deferred VALUES (1), (1)")
    if action == "refuse":
        return HttpResponse("try later", status=503)
    return JsonResponse({"processed": event.webhook_id})


urlpatterns = [path("hooks", hook)]


@pytest.fixture(scope="module")
def url(server_url: str) -> Iterator[str]:
    db = prepare_receiver_db(pg.create_database(server_url))
    parts = urlsplit(db)
    if settings.configured:
        pytest.skip("Django was configured elsewhere in this process")
    settings.configure(
        **{k: v for k, v in vars(django_settings).items() if k.isupper()},
        DATABASES={"default": {
            "ENGINE": "django.db.backends.postgresql", "NAME": parts.path.lstrip("/"),
            "HOST": parts.hostname, "PORT": parts.port or 5432, "USER": parts.username or "",
            "PASSWORD": parts.password or ""}})
    django.setup()
    yield db
    connection.close()
    pg.drop_database(server_url, db)


@pytest.fixture(autouse=True)
def clean(url: str) -> None:
    CALLS.clear()
    pg_conn = pg.admin(url)
    with pg_conn:
        pg_conn.execute(f"TRUNCATE effects, deferred, {pg.SCHEMA}.inbox".encode())


def post(body: bytes, headers: dict[str, str]) -> Any:
    client = Client(raise_request_exception=False)
    return client.post("/hooks", data=body, content_type="application/json", headers=headers)


def test_new_then_duplicate(url: str) -> None:
    body, headers = signed(msg_id="msg_1")
    first = post(body, headers)
    assert (first.status_code, first.json()) == (200, {"processed": "msg_1"})
    assert written(url) == (1, 1)
    assert post(body, headers).status_code == 200
    assert len(CALLS) == 1  # the view was not called for the duplicate
    assert written(url) == (1, 1)


@pytest.mark.parametrize("case", sorted(bad_requests()))
def test_bad_requests_get_400_and_write_nothing(case: str, url: str) -> None:
    body, headers = bad_requests()[case]
    assert post(body, headers).status_code == 400
    assert CALLS == []
    assert written(url) == (0, 0)


def test_non_2xx_answer_rolls_back_so_the_retry_is_processed(url: str) -> None:
    body, headers = signed({"action": "refuse"})
    assert post(body, headers).status_code == 503
    assert written(url) == (0, 0)
    assert post(body, headers).status_code == 503
    assert len(CALLS) == 2


def test_a_failed_commit_never_answers_2xx(url: str) -> None:
    body, headers = signed({"action": "fail at commit"})
    assert post(body, headers).status_code == 500
    assert written(url) == (0, 0)
