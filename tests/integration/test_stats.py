"""`outbox stats` on a known dataset."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from tests.support.cli import delivery_ids, execute, invoke, kill
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, emit

D = f"{SCHEMA}.deliveries"


def _set(db_url: str, ids: list[int], assignments: str, params: dict[str, object] | None = None
         ) -> None:
    execute(db_url, f"UPDATE {D} SET {assignments} WHERE id = ANY (%(ids)s)",
            {"ids": ids, **(params or {})})


@pytest.fixture
def dataset(db_url: str) -> tuple[uuid.UUID, uuid.UUID]:
    a = add_endpoint(db_url, "http://127.0.0.1:9/a", event_types=["x"])
    b = add_endpoint(db_url, "http://127.0.0.1:9/b", event_types=["only.b"])
    emit(db_url, 13, "x")
    emit(db_url, 1, "only.b")
    d = delivery_ids(db_url, "endpoint_id = %s", (a,))
    _set(db_url, d[0:1], "visible_at = now() - interval '10 minutes'")
    _set(db_url, d[1:2], "visible_at = now() - interval '1 minute', attempts = 2,"
                         " last_error = 'HTTP 503'")
    _set(db_url, d[2:3], "visible_at = now() - interval '1 minute', attempts = 1,"
                         " last_error = 'timeout'")
    _set(db_url, d[3:4], "visible_at = now() + interval '60 seconds', attempts = 1,"
                         " lease_token = %(token)s", {"token": uuid.uuid4()})
    _set(db_url, d[4:6], "visible_at = now() + interval '1 hour', attempts = 1")
    _set(db_url, d[6:10], "state = 'delivered', finished_at = now() - interval '10 minutes'")
    _set(db_url, d[10:11], "state = 'delivered', finished_at = now() - interval '2 hours'")
    _set(db_url, d[11:12], "state = 'dead', finished_at = now() - interval '30 minutes',"
                           " last_error = 'HTTP 400'")
    _set(db_url, d[12:13], "state = 'dead', finished_at = now() - interval '2 hours'")
    kill(db_url, delivery_ids(db_url, "endpoint_id = %s", (b,)), error="HTTP 410",
         ago=dt.timedelta(hours=3))
    return a, b


def test_stats_json_numbers(db_url: str, dataset: tuple[uuid.UUID, uuid.UUID]) -> None:
    a, b = dataset
    done = invoke(db_url, "stats", "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    first, second = data["endpoints"]
    assert first["endpoint_id"] == str(a) and second["endpoint_id"] == str(b)
    got = {k: first[k] for k in ("pending", "due", "in_flight", "delivered_1h", "dead_1h",
                                 "last_error")}
    assert got == {"pending": 6, "due": 3, "in_flight": 1, "delivered_1h": 4, "dead_1h": 1,
                   "last_error": "HTTP 503"}
    assert 595 <= first["oldest_due_seconds"] <= 630
    assert {k: second[k] for k in ("pending", "due", "in_flight", "delivered_1h", "dead_1h",
                                   "oldest_due_seconds", "last_error")} == {
        "pending": 0, "due": 0, "in_flight": 0, "delivered_1h": 0, "dead_1h": 0,
        "oldest_due_seconds": None, "last_error": "HTTP 410"}
    assert data["due"]["due"] == 3 and 595 <= data["due"]["oldest_due_seconds"] <= 630
    (tenantless,) = data["tenants"]
    assert tenantless["tenant"] is None and tenantless["due"] == 3
    assert 595 <= tenantless["oldest_due_seconds"] <= 630


def test_stats_table(db_url: str, dataset: tuple[uuid.UUID, uuid.UUID]) -> None:
    a, _ = dataset
    done = invoke(db_url, "stats")
    assert done.exit_code == 0, done.output
    header, row_a, row_b, total, blank, title, tenant_header, tenant_row = (
        done.stdout.splitlines())
    assert header.split()[:4] == ["endpoint", "url", "pending", "due"]
    assert row_a.split()[:8] == [str(a), "http://127.0.0.1:9/a", "6", "3", "1", "4", "1", "10m"]
    assert row_a.endswith("HTTP 503")
    assert row_b.split()[2:8] == ["0", "0", "0", "0", "0", "-"] and row_b.endswith("HTTP 410")
    assert total == "due now: 3, oldest due: 10m"
    assert (blank, title) == ("", "top tenants by due backlog (at most 10):")
    assert tenant_header.split() == ["tenant", "due", "oldest", "due"]
    assert tenant_row.split() == ["-", "3", "10m"]  # tenant-less events


def test_stats_watch(db_url: str, dataset: tuple[uuid.UUID, uuid.UUID]) -> None:
    done = invoke(db_url, "stats", "--json", "--watch", "0.2", "--iterations", "2")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(json.loads(x)["due"]["due"] == 3 for x in lines)
    human = invoke(db_url, "stats", "--watch", "--iterations", "1")
    assert human.exit_code == 0, human.output
    assert human.stdout.startswith("every 2s, Ctrl-C to stop")


@pytest.mark.parametrize(("args", "message"), [
    (["--watch", "0"], "0"), (["--watch", "often"], "often"),
    (["--watch", "nan"], "'nan' is not a finite number"), (["--watch", "inf"], "inf"),
    (["--watch", "1e300"], "1e+300")])
def test_stats_bad_arguments(db_url: str, args: list[str], message: str) -> None:
    done = invoke(db_url, "stats", *args)
    assert done.exit_code == 2
    assert message in done.stderr


def test_stats_on_an_empty_schema(db_url: str) -> None:
    done = invoke(db_url, "stats", "--json")
    assert json.loads(done.stdout)["endpoints"] == []
    assert json.loads(done.stdout)["tenants"] == []


def test_stats_without_schema_is_one_line(blank_db_url: str) -> None:
    done = invoke(blank_db_url, "stats")
    assert done.exit_code == 1
    assert "run `outbox migrate`" in done.stderr
