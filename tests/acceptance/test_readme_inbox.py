"""The README's "Receiving webhooks exactly once" snippet, executed as pasted."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outbox.settings import get_settings
from tests.support.inbox import SECRET, prepare_receiver_db, signed, written

ROOT = Path(__file__).resolve().parents[2]


def _snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Receiving webhooks exactly once", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)\n```", section, re.S)
    assert match, "the section has a python block"
    return match.group(1)


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
