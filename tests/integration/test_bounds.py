"""Every endpoint option bounded and every custom header checked, once
(outbox.admin.endpoint_options): refused with a clear error and nothing written through the
library and the CLI, and by the database's CHECK constraints for rows written around them;
migrations/0007_bounds.sql repairs and reports the rows it finds out of bounds."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from outbox.admin import endpoints as ep
from outbox.admin import migrations as mg
from outbox.admin.endpoint_options import EndpointOptions, limits
from outbox.errors import InvalidEndpoint
from tests.support.cli import invoke
from tests.support.pg import SCHEMA, count
from tests.support.workers import add_endpoint, rows
from tests.web.conftest import snapshot

NAN, INF = float("nan"), float("inf")
BAD_NUMBERS = [
    ("retry_base_seconds", NAN), ("retry_base_seconds", INF), ("retry_base_seconds", -INF),
    ("retry_base_seconds", 1e300), ("retry_base_seconds", 0.0),
    ("retry_cap_seconds", NAN), ("retry_cap_seconds", 1e20), ("retry_cap_seconds", -1.0),
    ("timeout_seconds", NAN), ("timeout_seconds", INF), ("timeout_seconds", 1e20),
    ("max_attempts", 0), ("max_attempts", 101), ("max_attempts", True),
    ("max_in_flight", 0), ("max_in_flight", 2147483648), ("max_in_flight", 10_001),
]
BAD_HEADERS: list[tuple[dict[str, Any], str]] = [
    ({"X-A": "a\x01b"}, "control character"), ({"X-A": "a\x7fb"}, "control character"),
    ({"X-A": "a\r\nInjected: 1"}, "control character"), ({"X-A": "caf\u00e9"}, "non-ASCII"),
    ({"X-A": "\x00"}, "control character"), ({"X-A": "x" * 4097}, "over 4096"),
    ({"Expect": "100-continue"}, "cannot be overridden"),
    ({"Upgrade": "h2c"}, "cannot be overridden"), ({"TE": "trailers"}, "cannot be overridden"),
    ({"Connection": "close"}, "cannot be overridden"),
    ({"Keep-Alive": "5"}, "cannot be overridden"), ({"Host": "x"}, "cannot be overridden"),
    ({"Transfer-Encoding": "chunked"}, "cannot be overridden"),
    ({"Content-Length": "1"}, "cannot be overridden"),
    ({"webhook-signature": "x"}, "cannot be overridden"),
    ({"a b": "x"}, "HTTP token"), ({"": "x"}, "HTTP token"), ({"X:A": "x"}, "HTTP token"),
    ({"X" * 129: "x"}, "HTTP token"), ({f"X-{i}": "v" for i in range(33)}, "over 32"),
    ({"X-A": 5}, "must be a string"),
]


@pytest.mark.parametrize(("name", "value"), BAD_NUMBERS,
                         ids=[f"{n}={v!r}" for n, v in BAD_NUMBERS])
def test_bad_numbers_refused_by_add_and_update(db_url: str, name: str, value: Any) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(InvalidEndpoint, match=f"{name} must be positive"):
            ep.add(c, "https://example.com/hook", schema=SCHEMA, **{name: value})
        assert count(db_url, "endpoints") == 0
        endpoint = ep.add(c, "https://example.com/hook", schema=SCHEMA).endpoint
        before = snapshot(db_url)
        with pytest.raises(InvalidEndpoint, match=f"{name} must be positive"):
            ep.update(c, endpoint.id, schema=SCHEMA, **{name: value})
        with pytest.raises(InvalidEndpoint, match=f"{name} must be positive"):
            ep.update(c, endpoint.id, schema=SCHEMA,
                      options=EndpointOptions.model_construct(**{name: value}))
    assert snapshot(db_url) == before


@pytest.mark.parametrize(("headers", "reason"), BAD_HEADERS,
                         ids=[repr(h)[:40] for h, _ in BAD_HEADERS])
def test_bad_headers_refused_by_add_update_and_the_database(
        db_url: str, headers: dict[str, Any], reason: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(InvalidEndpoint, match=reason):
            ep.add(c, "https://example.com/hook", schema=SCHEMA, headers=headers)
        endpoint = ep.add(c, "https://example.com/hook", schema=SCHEMA).endpoint
        before = snapshot(db_url)
        with pytest.raises(InvalidEndpoint, match=reason):
            ep.update(c, endpoint.id, schema=SCHEMA, headers=headers)
        # NUL never reaches the CHECK: jsonb cannot hold it
        with pytest.raises((psycopg.errors.CheckViolation,
                            psycopg.errors.UntranslatableCharacter)):
            c.execute(f"UPDATE {SCHEMA}.endpoints SET headers = %s WHERE id = %s",
                      (psycopg.types.json.Jsonb(headers), endpoint.id))
    assert snapshot(db_url) == before


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, v in BAD_NUMBERS
                                             if not isinstance(v, bool)])
def test_bad_numbers_refused_by_the_database(db_url: str, name: str, value: Any) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x")
    with psycopg.connect(db_url, autocommit=True) as c, pytest.raises((  # 2**31: no int4
            psycopg.errors.CheckViolation, psycopg.errors.NumericValueOutOfRange)):
        c.execute(f"UPDATE {SCHEMA}.endpoints SET {name} = %s WHERE id = %s".encode(),
                  (value, endpoint))


def test_good_values_at_the_bounds_are_kept(db_url: str) -> None:
    top = {limit["name"]: limit["max"] for limit in limits()}
    low = {limit["name"]: limit["min"] for limit in limits()}
    headers = {"X-Team": "billing\tdesk ~!", "Authorization": "Bearer abc"}
    with psycopg.connect(db_url, autocommit=True) as c:
        high = ep.add(c, "https://example.com/a", schema=SCHEMA, headers=headers, **top)
        small = ep.add(c, "https://example.com/b", schema=SCHEMA,
                       options=EndpointOptions(**low))
        ep.update(c, small.endpoint.id, schema=SCHEMA, max_in_flight=7)
        again = ep.get(c, small.endpoint.id, schema=SCHEMA)
    assert high.endpoint.max_in_flight == 10_000 and high.endpoint.headers == headers
    assert again.max_in_flight == 7 and again.retry_base_seconds == 0.001


@pytest.mark.parametrize(("args", "message"), [
    (["--retry-base-seconds", "nan"], "retry_base_seconds must be positive"),
    (["--retry-base-seconds", "inf"], "retry_base_seconds must be positive"),
    (["--retry-cap-seconds", "1e400"], "retry_cap_seconds must be positive"),
    (["--timeout", "1e300"], "timeout_seconds must be positive"),
    (["--max-in-flight", "2147483648"], "max_in_flight must be positive"),
    (["--max-in-flight", "0"], "max_in_flight must be positive"),
    (["--max-in-flight", "1.5"], "is not an integer"),
    (["--max-attempts", "101"], "max_attempts must be positive"),
    (["--header", "Expect=100-continue"], "cannot be overridden"),
    (["--header", "X-A=a\x01b"], "control character"),
])
def test_cli_refuses_bad_options_on_add_and_update(db_url: str, args: list[str],
                                                   message: str) -> None:
    endpoint = add_endpoint(db_url, "http://127.0.0.1:9/x")
    before = snapshot(db_url)
    env = {"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8"}
    added = invoke(db_url, "endpoints", "add", "http://127.0.0.1:9/y", *args, env=env)
    updated = invoke(db_url, "endpoints", "update", str(endpoint), *args, env=env)
    for done in (added, updated):
        assert done.exit_code in (1, 2) and message in done.stderr, done.output
    assert snapshot(db_url) == before


def test_cli_sets_max_in_flight_on_add_and_update(db_url: str) -> None:
    env = {"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8"}
    added = invoke(db_url, "endpoints", "add", "http://127.0.0.1:9/y", "--max-in-flight", "3",
                   env=env)
    assert added.exit_code == 0, added.output
    (endpoint, n), = rows(db_url, f"SELECT id, max_in_flight FROM {SCHEMA}.endpoints")
    assert n == 3
    updated = invoke(db_url, "endpoints", "update", str(endpoint), "--max-in-flight", "9")
    assert updated.exit_code == 0, updated.output
    assert rows(db_url, f"SELECT max_in_flight FROM {SCHEMA}.endpoints") == [(9,)]
    helped = invoke(db_url, "endpoints", "add", "--help")
    assert "--max-in-flight" in helped.output and "1 to 10,000" in helped.output


BAD_ROWS = {
    "retry_base_seconds": "'NaN'", "retry_cap_seconds": "'Infinity'",
    "timeout_seconds": "1e300", "max_in_flight": "2147483647",
}


def test_0007_repairs_and_reports_bad_rows(blank_db_url: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    before_0007 = [m for m in mg.available() if m.version < 7]
    monkeypatch.setattr(mg, "available", lambda inbox=False: before_0007)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        mg.migrate(c, SCHEMA)
        sets = ", ".join(f"{k} = {v}" for k, v in BAD_ROWS.items())
        c.execute(f"""INSERT INTO {SCHEMA}.endpoints (id, url, secret, headers) VALUES
            ('00000000-0000-7000-8000-000000000001', 'http://x/1', 's',
             '{{"X-Ok": "1", "Expect": "100-continue", "X-Bad": "a\\u0001"}}'),
            ('00000000-0000-7000-8000-000000000002', 'http://x/2', 's', '["x"]'),
            ('00000000-0000-7000-8000-000000000003', 'http://x/3', 's', '{{"X-Good": "1"}}')
            """.encode())
        c.execute(f"UPDATE {SCHEMA}.endpoints SET {sets}"
                  " WHERE url = 'http://x/1'".encode())
        monkeypatch.undo()
        applied = mg.migrate(c, SCHEMA)
        assert [m.name for m in applied] == [m.name for m in mg.available() if m.version >= 7]
        assert applied[0].name == "bounds"
        repaired = c.execute(f"""SELECT url, headers, retry_base_seconds, retry_cap_seconds,
                                        timeout_seconds, max_in_flight
                                   FROM {SCHEMA}.endpoints ORDER BY url""").fetchall()
        report = c.execute(f"""SELECT right(endpoint_id::text, 1), field, old_value
                                 FROM {SCHEMA}.endpoint_repairs ORDER BY id""").fetchall()
        with pytest.raises(psycopg.errors.CheckViolation):
            c.execute(f"UPDATE {SCHEMA}.endpoints SET timeout_seconds = 'NaN'")
    assert repaired == [("http://x/1", {"X-Ok": "1"}, None, None, None, None),
                        ("http://x/2", {}, None, None, None, None),
                        ("http://x/3", {"X-Good": "1"}, None, None, None, None)]
    assert [(e, f) for e, f, _ in report] == [
        ("1", "headers"), ("1", "max_in_flight"), ("1", "retry_base_seconds"),
        ("1", "retry_cap_seconds"), ("1", "timeout_seconds"), ("2", "headers")]
    assert ("1", "retry_base_seconds", "NaN") in report
