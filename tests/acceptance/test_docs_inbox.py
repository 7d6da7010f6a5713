"""The inbox snippet of docs/guides/inbox.md (exactly-once effects), executed as
pasted."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from outbox.settings import get_settings
from tests.support.docs import snippet
from tests.support.inbox import SECRET, prepare_receiver_db, signed, written


def _snippet() -> str:
    return snippet("guides/inbox.md", "inbox-receive")


def test_inbox_snippet_runs(blank_db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUTBOX_SCHEMA", raising=False)
    get_settings.cache_clear()
    url = prepare_receiver_db(blank_db_url)
    namespace: dict[str, Any] = {}
    exec(_snippet().replace('"whsec_..."', repr(SECRET)), namespace)
    handle = namespace["handle"]
    body, headers = signed({"invoice": 42})
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE payments (invoice int)")
        conn.commit()
        assert handle(conn, body, headers) == 200
        assert handle(conn, body, headers) == 200  # the retry: no second payment
        assert handle(conn, body.replace(b"42", b"43"), headers) == 400
        stale = signed({"invoice": 7}, timestamp=int(time.time()) - 3600)
        assert handle(conn, *stale) == 400
        assert conn.execute("SELECT invoice FROM payments").fetchall() == [(42,)]
    assert written(url)[0] == 1
