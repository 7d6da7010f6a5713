"""outbox.contrib.fastapi with FastAPI's own TestClient, on real PostgreSQL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient

from outbox.contrib.fastapi import Delivery, WebhookInbox
from tests.support.inbox import SECRET, bad_requests, prepare_receiver_db, signed, written
from tests.support.pg import SCHEMA


def make_app(url: str, calls: list[Any]) -> FastAPI:
    inbox = WebhookInbox(SECRET, lambda: psycopg.AsyncConnection.connect(url), schema=SCHEMA)
    app = FastAPI()

    @app.post("/hooks")
    async def hook(delivery: Delivery = inbox.depends) -> dict[str, str]:
        calls.append(delivery.event.payload)
        await delivery.conn.execute("INSERT INTO effects VALUES (%s, %s)",
                                    (delivery.event.webhook_id, delivery.event.body.decode()))
        action = delivery.event.payload.get("action")
        if action == "refuse":
            raise HTTPException(503, "try later")
        if action == "fail at commit":
            await delivery.conn.execute("INSERT INTO deferred VALUES (1), (1)")
        return {"processed": delivery.event.webhook_id}

    return app


@pytest.fixture
def url(blank_db_url: str) -> str:
    return prepare_receiver_db(blank_db_url)


def test_new_then_duplicate(url: str) -> None:
    calls: list[Any] = []
    client = TestClient(make_app(url, calls))
    body, headers = signed(msg_id="msg_1")
    first = client.post("/hooks", content=body, headers=headers)
    assert (first.status_code, first.json()) == (200, {"processed": "msg_1"})
    assert written(url) == (1, 1)
    again = client.post("/hooks", content=body, headers=headers)
    assert again.status_code == 200
    assert len(calls) == 1  # the handler was not called for the duplicate
    assert written(url) == (1, 1)


@pytest.mark.parametrize("case", sorted(bad_requests()))
def test_bad_requests_get_400_and_write_nothing(case: str, url: str) -> None:
    calls: list[Any] = []
    body, headers = bad_requests()[case]
    answer = TestClient(make_app(url, calls)).post("/hooks", content=body, headers=headers)
    assert answer.status_code == 400
    assert calls == []
    assert written(url) == (0, 0)


def test_handler_raising_rolls_back_so_the_retry_is_processed(url: str) -> None:
    calls: list[Any] = []
    client = TestClient(make_app(url, calls))
    body, headers = signed({"action": "refuse"})
    assert client.post("/hooks", content=body, headers=headers).status_code == 503
    assert written(url) == (0, 0)
    assert client.post("/hooks", content=body, headers=headers).status_code == 503
    assert len(calls) == 2  # the id was not recorded: the retry reached the handler


def test_a_failed_commit_never_answers_2xx(url: str) -> None:
    """The commit happens before the response is sent (scope="function")."""
    calls: list[Any] = []
    client = TestClient(make_app(url, calls), raise_server_exceptions=False)
    body, headers = signed({"action": "fail at commit"})
    assert client.post("/hooks", content=body, headers=headers).status_code == 500
    assert written(url) == (0, 0)
