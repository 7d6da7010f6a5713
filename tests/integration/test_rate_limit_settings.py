"""Rate limit settings of an endpoint through the library and the CLI (the API and the
portal: tests/web/test_rate_limits.py); a tenant may lower its endpoint's limit, never
raise it."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from outbox import EndpointNotFound, InvalidEndpoint
from outbox.admin import endpoints as ep
from tests.support.cli import run_cli
from tests.support.pg import SCHEMA, count

URL = "https://example.com/hook"


def test_add_update_and_clear(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        e = ep.add(c, URL, schema=SCHEMA, rate_limit=50, rate_burst=100).endpoint
        assert (e.rate_limit, e.rate_burst) == (50, 100)
        e = ep.update(c, e.id, schema=SCHEMA, rate_limit=20).endpoint
        assert (e.rate_limit, e.rate_burst) == (20, 100)
        e = ep.update(c, e.id, schema=SCHEMA, rate_burst=5).endpoint
        assert (e.rate_limit, e.rate_burst) == (20, 5)
        e = ep.update(c, e.id, schema=SCHEMA, clear_rate_limit=True).endpoint
        assert (e.rate_limit, e.rate_burst) == (None, None)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"rate_limit": 0}, "rate_limit must be positive"),
        ({"rate_limit": -5}, "rate_limit must be positive"),
        ({"rate_limit": 2_000_000}, "at most"),
        ({"rate_burst": 10}, "rate_burst needs rate_limit"),
        ({"rate_limit": 10, "rate_burst": 0}, "rate_burst must be positive"),
        ({"rate_limit": 10, "rate_burst": 2.5}, "whole number"),
    ],
)
def test_bad_rate_settings_write_nothing(db_url: str, kwargs: dict[str, Any],
                                         reason: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c, \
            pytest.raises(InvalidEndpoint, match=reason):
        ep.add(c, URL, schema=SCHEMA, **kwargs)
    assert count(db_url, "endpoints") == 0


def test_bad_updates_change_nothing(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        e = ep.add(c, URL, schema=SCHEMA).endpoint
        with pytest.raises(InvalidEndpoint, match="rate_burst needs rate_limit"):
            ep.update(c, e.id, schema=SCHEMA, rate_burst=10)
        with pytest.raises(InvalidEndpoint, match="not both"):
            ep.update(c, e.id, schema=SCHEMA, rate_limit=10, clear_rate_limit=True)
        with pytest.raises(InvalidEndpoint, match="positive"):
            ep.update(c, e.id, schema=SCHEMA, rate_limit=-1)
        assert ep.get(c, e.id, schema=SCHEMA) == e


def test_tenant_may_lower_never_raise(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        e = ep.add(c, URL, schema=SCHEMA, tenant="acme", rate_limit=50).endpoint
        lowered = ep.set_tenant_rate_limit(c, e.id, 10, tenant="acme", schema=SCHEMA)
        assert lowered.tenant_rate_limit == 10
        with pytest.raises(InvalidEndpoint, match="above this endpoint's limit of 50/s"):
            ep.set_tenant_rate_limit(c, e.id, 60, tenant="acme", schema=SCHEMA)
        with pytest.raises(EndpointNotFound):
            ep.set_tenant_rate_limit(c, e.id, 5, tenant="other", schema=SCHEMA)
        assert ep.get(c, e.id, schema=SCHEMA).tenant_rate_limit == 10
        cleared = ep.set_tenant_rate_limit(c, e.id, None, tenant="acme", schema=SCHEMA)
        assert cleared.tenant_rate_limit is None


def test_cli_add_update_show_and_stats(db_url: str) -> None:
    added = run_cli(db_url, "endpoints", "add", URL, "--rate-limit", "50", "--burst", "80")
    assert added.returncode == 0, added.stderr
    endpoint_id = added.stdout.split()[1]
    shown = run_cli(db_url, "endpoints", "show", endpoint_id)
    assert "rate limit:   50/s, burst 80" in shown.stdout, shown.stdout
    assert "allowed rate: 50/s" in shown.stdout
    data = json.loads(run_cli(db_url, "endpoints", "show", endpoint_id, "--json").stdout)
    assert data["flow"] == {"rate_limit": 50.0, "allowed_rate": 50.0, "throttled": False,
                            "paused_until": None, "throttled_total": 0}
    updated = run_cli(db_url, "endpoints", "update", endpoint_id, "--no-rate-limit")
    assert updated.returncode == 0 and "rate limit:  -" in updated.stdout, updated.stdout
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("UPDATE outbox.endpoint_flow SET adaptive_rate = 7, decreased_at = now(),"
                  " throttled_total = 3")
    shown = run_cli(db_url, "endpoints", "show", endpoint_id)
    assert "allowed rate: 7/s (throttled)" in shown.stdout, shown.stdout
    stats = json.loads(run_cli(db_url, "stats", "--json").stdout)
    # the endpoint has no deliveries: stats lists endpoints with a queue or history
    assert all(r["flow"]["throttled"] for r in stats["endpoints"]
               if r["endpoint_id"] == endpoint_id)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate-limit", "0"], "--rate-limit"),
        (["--rate-limit", "abc"], "--rate-limit"),
        (["--rate-limit", "10", "--burst", "0"], "--burst"),
        (["--burst", "5"], "rate_burst needs rate_limit"),
    ],
)
def test_cli_bad_rate_input(db_url: str, args: list[str], message: str) -> None:
    done = run_cli(db_url, "endpoints", "add", URL, *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert count(db_url, "endpoints") == 0
