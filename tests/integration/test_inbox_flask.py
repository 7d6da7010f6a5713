"""outbox.contrib.flask with Flask's own test client, on real PostgreSQL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from flask import Flask

from outbox.contrib.flask import webhook_view
from outbox.inbox import Received
from tests.support.inbox import SECRET, bad_requests, prepare_receiver_db, signed, written
from tests.support.pg import SCHEMA


def make_app(url: str, calls: list[Any]) -> Flask:
    app = Flask(__name__)

    @app.post("/hooks/<tenant>")
    @webhook_view(SECRET, lambda: psycopg.connect(url), schema=SCHEMA)
    def hook(event: Received, conn: psycopg.Connection[Any], tenant: str
             ) -> tuple[dict[str, str], int]:
        calls.append((tenant, event.payload))
        conn.execute("INSERT INTO effects VALUES (%s, %s)",
                     (event.webhook_id, event.body.decode()))
        action = event.payload.get("action")
        if action == "refuse":
            return {"error": "try later"}, 503
        if action == "fail at commit":
            conn.execute("INSERT INTO deferred VALUES (1), (1)")
        return {"processed": event.webhook_id, "tenant": tenant}, 200

    return app


@pytest.fixture
def url(blank_db_url: str) -> str:
    return prepare_receiver_db(blank_db_url)


def test_new_then_duplicate(url: str) -> None:
    calls: list[Any] = []
    client = make_app(url, calls).test_client()
    body, headers = signed(msg_id="msg_1")
    first = client.post("/hooks/acme", data=body, headers=headers)
    assert (first.status_code, first.json) == (200, {"processed": "msg_1", "tenant": "acme"})
    assert written(url) == (1, 1)
    assert client.post("/hooks/acme", data=body, headers=headers).status_code == 200
    assert len(calls) == 1  # the view was not called for the duplicate
    assert written(url) == (1, 1)


@pytest.mark.parametrize("case", sorted(bad_requests()))
def test_bad_requests_get_400_and_write_nothing(case: str, url: str) -> None:
    calls: list[Any] = []
    body, headers = bad_requests()[case]
    answer = make_app(url, calls).test_client().post("/hooks/acme", data=body, headers=headers)
    assert answer.status_code == 400
    assert calls == []
    assert written(url) == (0, 0)


def test_non_2xx_answer_rolls_back_so_the_retry_is_processed(url: str) -> None:
    calls: list[Any] = []
    client = make_app(url, calls).test_client()
    body, headers = signed({"action": "refuse"})
    assert client.post("/hooks/acme", data=body, headers=headers).status_code == 503
    assert written(url) == (0, 0)
    assert client.post("/hooks/acme", data=body, headers=headers).status_code == 503
    assert len(calls) == 2


def test_a_failed_commit_never_answers_2xx(url: str) -> None:
    calls: list[Any] = []
    client = make_app(url, calls).test_client()
    body, headers = signed({"action": "fail at commit"})
    assert client.post("/hooks/acme", data=body, headers=headers).status_code == 500
    assert written(url) == (0, 0)
