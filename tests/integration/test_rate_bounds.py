"""An endpoint's rate limits are bounded like its other numbers (RATE_MAX,
outbox.admin.endpoint_options): NaN, infinities and values out of range are refused with a
clear error and nothing written through the library and the CLI, and by the database's
CHECK constraints for rows written around them; migrations/0022_rate_bounds.sql repairs
and reports the rows it finds out of bounds.

A NaN rate limit used to be accepted by ``endpoints.add``/``update`` and by
``outbox endpoints add --rate-limit nan``; every listing of endpoints then failed for every
tenant (JSON has no NaN)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from outbox.admin import endpoints as ep
from outbox.admin import migrations as mg
from outbox.errors import InvalidEndpoint
from tests.support.cli import invoke
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint
from tests.web.conftest import snapshot

NAN, INF = float("nan"), float("inf")
URL = "http://127.0.0.1:9/x"
BAD_RATES: list[tuple[str, Any]] = [
    ("rate_limit", NAN), ("rate_limit", INF), ("rate_limit", -INF), ("rate_limit", 1e300),
    ("rate_limit", 0.0), ("rate_limit", -1.0), ("rate_limit", 1_000_001),
    ("rate_limit", True), ("rate_limit", "5"),
    ("rate_burst", 0), ("rate_burst", 1_000_001), ("rate_burst", 2**31), ("rate_burst", 1.5),
]


@pytest.mark.parametrize(("name", "value"), BAD_RATES,
                         ids=[f"{n}={v!r}" for n, v in BAD_RATES])
def test_bad_rates_refused_by_add_and_update(db_url: str, name: str, value: Any) -> None:
    endpoint = add_endpoint(db_url, URL, tenant="acme", rate_limit=10.0)
    before = snapshot(db_url)
    given = {name: value} if name == "rate_limit" else {"rate_limit": 5.0, name: value}
    with psycopg.connect(db_url, autocommit=True) as c:
        with pytest.raises(InvalidEndpoint, match=name):
            ep.add(c, URL, schema=SCHEMA, **given)
        with pytest.raises(InvalidEndpoint, match=name):
            ep.update(c, endpoint, schema=SCHEMA, **given)
    assert snapshot(db_url) == before


@pytest.mark.parametrize("value", [NAN, INF, 1e300, 0.0, True],
                         ids=["nan", "inf", "1e300", "0", "True"])
def test_bad_tenant_rates_refused(db_url: str, value: Any) -> None:
    endpoint = add_endpoint(db_url, URL, tenant="acme")
    before = snapshot(db_url)
    with psycopg.connect(db_url, autocommit=True) as c, pytest.raises(InvalidEndpoint,
                                                                      match="rate_limit"):
        ep.set_tenant_rate_limit(c, endpoint, value, tenant="acme", schema=SCHEMA)
    assert snapshot(db_url) == before


@pytest.mark.parametrize(("args", "message"), [
    (["--rate-limit", "nan"], "at most 1,000,000 (a finite number)"),
    (["--rate-limit", "inf"], "at most 1,000,000 (a finite number)"),
    (["--rate-limit", "1e400"], "at most 1,000,000 (a finite number)"),
    (["--rate-limit", "0"], "must be above 0"),
    (["--rate-limit", "1000001"], "must be above 0"),
    (["--rate-limit", "fast"], "is not a number"),
    (["--rate-limit", "5", "--burst", "1000001"], "1000001 is not in the range"),
])
def test_cli_refuses_bad_rates_on_add_and_update(db_url: str, args: list[str],
                                                 message: str) -> None:
    endpoint = add_endpoint(db_url, URL)
    before = snapshot(db_url)
    env = {"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8"}
    added = invoke(db_url, "endpoints", "add", "http://127.0.0.1:9/y", *args, env=env)
    updated = invoke(db_url, "endpoints", "update", str(endpoint), *args, env=env)
    for done in (added, updated):
        assert done.exit_code == 2 and message in done.stderr, done.output
    assert snapshot(db_url) == before


@pytest.mark.parametrize(("name", "value"), [
    ("rate_limit", "NaN"), ("rate_limit", "Infinity"), ("rate_limit", "1e300"),
    ("rate_burst", "1000001"), ("rate_burst", "2147483647"),
    ("tenant_rate_limit", "NaN"), ("tenant_rate_limit", "Infinity")])
def test_bad_rates_refused_by_the_database(db_url: str, name: str, value: str) -> None:
    endpoint = add_endpoint(db_url, URL)
    with psycopg.connect(db_url, autocommit=True) as c, pytest.raises(
            psycopg.errors.CheckViolation, match=f"endpoints_{name}_bounds"):
        c.execute(f"UPDATE {SCHEMA}.endpoints SET {name} = %s WHERE id = %s".encode(),
                  (value, endpoint))


def test_rates_at_the_bounds_are_kept(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        top = ep.add(c, URL, schema=SCHEMA, tenant="acme", rate_limit=1_000_000,
                     rate_burst=1_000_000).endpoint
        low = ep.set_tenant_rate_limit(c, top.id, 1e-3, tenant="acme", schema=SCHEMA)
    assert (top.rate_limit, top.rate_burst, low.tenant_rate_limit) == (1_000_000, 1_000_000,
                                                                       1e-3)


def test_0022_repairs_and_reports_bad_rows(blank_db_url: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    before_0022 = [m for m in mg.available() if m.version < 22]
    monkeypatch.setattr(mg, "available", lambda inbox=False: before_0022)
    with psycopg.connect(blank_db_url, autocommit=True) as c:
        mg.migrate(c, SCHEMA)
        c.execute(f"""INSERT INTO {SCHEMA}.endpoints
                        (id, url, secret, rate_limit, rate_burst, tenant_rate_limit) VALUES
            ('00000000-0000-7000-8000-000000000001', 'http://x/1', 's', 'NaN', 2000000, 5),
            ('00000000-0000-7000-8000-000000000002', 'http://x/2', 's', 'Infinity', NULL,
             'NaN'),
            ('00000000-0000-7000-8000-000000000003', 'http://x/3', 's', 50, 10, 20)
            """.encode())
        monkeypatch.undo()
        applied = mg.migrate(c, SCHEMA)
        assert "rate_bounds" in [m.name for m in applied]
        repaired = c.execute(f"""SELECT url, rate_limit, rate_burst, tenant_rate_limit
                                   FROM {SCHEMA}.endpoints ORDER BY url""").fetchall()
        report = c.execute(f"""SELECT right(endpoint_id::text, 1), field, old_value
                                 FROM {SCHEMA}.endpoint_repairs ORDER BY id""").fetchall()
        with pytest.raises(psycopg.errors.CheckViolation):
            c.execute(f"UPDATE {SCHEMA}.endpoints SET rate_limit = 'NaN'")
    assert repaired == [("http://x/1", None, None, 5.0), ("http://x/2", None, None, None),
                        ("http://x/3", 50.0, 10, 20.0)]
    assert report == [("1", "rate_burst", "2000000"), ("1", "rate_limit", "NaN"),
                      ("2", "rate_limit", "Infinity"), ("2", "tenant_rate_limit", "NaN")]
