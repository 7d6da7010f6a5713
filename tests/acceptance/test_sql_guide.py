"""docs/guides/sql.md's snippets work when pasted: the psql one-liner, the capture commands
and the trigger recipe, against a test database; so do the same snippets in the README's
"Emit from SQL" section."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "guides" / "sql.md").read_text()
README = (ROOT / "README.md").read_text().split("\n## Emit from SQL", 1)[1].split("\n## ", 1)[0]


def _blocks(lang: str, text: str = GUIDE) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)\n```", text, re.S)


def _sh(db_url: str, script: str) -> str:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "DATABASE_URL": db_url, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("OUTBOX_DATABASE_URL", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("text", [GUIDE, README], ids=["guide", "readme"])
def test_psql_one_liner(db_url: str, text: str) -> None:
    (psql,) = [b for b in _blocks("sh", text) if b.startswith("psql ")]
    out = _sh(db_url, psql)
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT id::text, type, payload::text, key FROM outbox.events"
                         ).fetchall()
    assert len(rows) == 1 and rows[0][0] in out
    assert rows[0][1:] == ("order.paid", '{"order": 7, "total": "9.50"}', "order-7")


def test_capture_commands_and_payload_shape(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE orders (id int PRIMARY KEY, status text, total numeric,"
                  " shop_id text)")
    (commands,) = [b for b in _blocks("sh") if b.startswith("outbox capture add")]
    add = commands.split("\noutbox capture remove")[0]  # keep the capture
    assert "orders\ttype=order.changed" in _sh(db_url, add)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO orders VALUES (7, 'new', 9.50, 'acme')")
        c.execute("UPDATE orders SET status = 'paid' WHERE id = 7")
        row = c.execute("SELECT payload::text, key, tenant FROM outbox.events"
                        " ORDER BY id DESC LIMIT 1").fetchone()
    assert row is not None
    (shown,) = _blocks("json")
    assert json.loads(row[0]) == json.loads(shown)
    assert row[1:] == ("7", "acme")
    _sh(db_url, commands)  # and remove it
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM outbox.captures").fetchone() == (0,)


def test_readme_capture_command(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE orders (id int PRIMARY KEY, status text, total numeric,"
                  " note text)")
    (add,) = [b for b in _blocks("sh", README) if b.startswith("outbox capture add")]
    assert "capturing orders: delete,insert,update -> order.changed" in _sh(db_url, add)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("INSERT INTO orders VALUES (7, 'new', 9.50, 'x')")
        c.execute("UPDATE orders SET note = 'y'")  # no captured column changed: no event
        c.execute("UPDATE orders SET status = 'paid'")
        rows = c.execute("SELECT type, payload, key FROM outbox.events").fetchall()
    events = sorted((p["op"], t, k, p["new"]) for t, p, k in rows)
    assert events == [("insert", "order.changed", "7", {"id": 7, "status": "new", "total": 9.5}),
                      ("update", "order.changed", "7", {"id": 7, "status": "paid", "total": 9.5})]


@pytest.mark.parametrize("text", [GUIDE, README], ids=["guide", "readme"])
def test_trigger_recipe(db_url: str, text: str) -> None:
    (recipe,) = [b for b in _blocks("sql", text) if "CREATE FUNCTION orders_paid" in b]
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE orders (id int PRIMARY KEY, status text, total numeric)")
        c.execute(recipe.encode())
        c.execute("INSERT INTO orders VALUES (7, 'new', 9.50)")
        c.execute("UPDATE orders SET total = 10")
        c.execute("UPDATE orders SET status = 'paid'")
        c.execute("UPDATE orders SET status = 'paid'")
        rows = c.execute("SELECT type, payload::text, key FROM outbox.events").fetchall()
    assert rows == [("order.paid", '{"order": 7, "total": "10"}', "7")]
