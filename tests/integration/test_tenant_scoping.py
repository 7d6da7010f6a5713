"""Operator commands scoped with --tenant: dead list, replay, stats, prune (and endpoints).

A delivery belongs to the tenant of its EVENT: the all-tenants endpoint carries every
tenant's rows, and a scope of acme takes acme's rows of it and leaves globex's alone.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

import click
import psycopg
import pytest

import outbox
from outbox._db import queries
from outbox._db.connection import render
from outbox.admin import deadletter as dl
from outbox.admin import replay as rp
from outbox.admin import retention
from outbox.admin import stats as st
from outbox.cli import cli, load_commands
from outbox.errors import InvalidEvent
from tests.support.cli import delivery_ids, execute, invoke, kill, old_uuid7, snapshot
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint

A, B = "acme", "globex"
BASE = "http://127.0.0.1:9/"
DAY = dt.timedelta(days=1)


@dataclass
class Tenant:
    """One tenant's data. Each event goes to the tenant's own endpoint and to the
    all-tenants one: ``dead``, ``old`` (delivered 10 days ago) and ``pending`` hold the
    delivery ids of both. ``orphan``: an event 10 days old with no delivery left."""

    name: str | None
    endpoint: uuid.UUID
    url: str
    events: list[uuid.UUID]
    dead: list[int]
    old: list[int]
    pending: list[int]
    orphan: uuid.UUID

    @property
    def foreign_marks(self) -> list[str]:
        """What must not appear in another tenant's output: endpoint id and url, events."""
        return [str(self.endpoint), self.url, *map(str, self.events), str(self.orphan)]


@dataclass
class World:
    a: Tenant
    b: Tenant
    none: Tenant  # tenant-less events and endpoint
    everyone: uuid.UUID  # the all-tenants endpoint


def _tenant(db_url: str, name: str | None, pending: int) -> Tenant:
    url = BASE + (name or "no-tenant")
    endpoint = add_endpoint(db_url, url, tenant=name)
    with psycopg.connect(db_url) as c:
        events = outbox.emit_many(c, [outbox.Event("invoice.paid", {"n": i}, tenant=name)
                                      for i in range(3 + pending)])
        c.commit()
    rows = [delivery_ids(db_url, "event_id = %s", (e,)) for e in events]
    dead, old, waiting = rows[0] + rows[1], rows[2], [i for r in rows[3:] for i in r]
    kill(db_url, dead)
    kill(db_url, old, ago=10 * DAY)  # attempt log, then: delivered 10 days ago
    execute(db_url, f"UPDATE {SCHEMA}.deliveries SET state = 'delivered' WHERE id = ANY (%s)",
            (old,))
    orphan = old_uuid7(dt.datetime.now(dt.UTC) - 10 * DAY)
    execute(db_url, f"INSERT INTO {SCHEMA}.events (id, type, payload, tenant, created_at)"
                    " VALUES (%s, 'old.event', '{}', %s, now() - interval '10 days')",
            (orphan, name))
    return Tenant(name, endpoint, url, events, dead, old, waiting, orphan)


@pytest.fixture
def world(db_url: str) -> World:
    everyone = add_endpoint(db_url, BASE + "all-tenants", all_tenants=True)
    return World(_tenant(db_url, A, 1), _tenant(db_url, B, 2), _tenant(db_url, None, 1),
                 everyone)


def _rows_of(db_url: str, tenant: str | None) -> tuple[list[tuple[Any, ...]], ...]:
    """Every row of ``tenant``: its endpoints, events, their deliveries and attempt logs."""
    of = "IS NOT DISTINCT FROM %(t)s"
    return tuple(execute(db_url, query.format(s=SCHEMA, of=of), {"t": tenant}) for query in (
        "SELECT * FROM {s}.endpoints WHERE tenant {of} AND NOT all_tenants ORDER BY id",
        "SELECT * FROM {s}.events WHERE tenant {of} ORDER BY id",
        "SELECT d.* FROM {s}.deliveries d JOIN {s}.events e ON e.id = d.event_id"
        " WHERE e.tenant {of} ORDER BY d.id",
        "SELECT a.* FROM {s}.delivery_attempts a JOIN {s}.deliveries d ON d.id = a.delivery_id"
        " JOIN {s}.events e ON e.id = d.event_id WHERE e.tenant {of} ORDER BY a.id",
    ))


def _others(db_url: str) -> tuple[Any, ...]:
    return _rows_of(db_url, B), _rows_of(db_url, None)


def _states(db_url: str, ids: list[int]) -> set[str]:
    return {r[0] for r in execute(db_url, f"SELECT state FROM {SCHEMA}.deliveries"
                                          " WHERE id = ANY (%s)", (ids,))}


# --- what each scoped command does -------------------------------------------------------


def test_replay_all_scoped_to_a_tenant_never_touches_another(db_url: str, world: World) -> None:
    before = _others(db_url)
    done = invoke(db_url, "replay", "--tenant", A, "--all", "--batch-size", "1")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[-1] == "replayed 4 deliveries in 4 batch(es)"
    assert _states(db_url, world.a.dead) == {"pending"}  # its endpoint's and all-tenants'
    assert _others(db_url) == before  # byte-identical, attempt logs included


def test_replay_dry_run_scoped_to_a_tenant(db_url: str, world: World) -> None:
    before = snapshot(db_url)
    done = invoke(db_url, "replay", "--tenant", A, "--all", "--dry-run", "--json")
    assert done.exit_code == 0, done.output
    plan = json.loads(done.stdout)
    assert plan["total"] == 4
    assert {e["endpoint_id"] for e in plan["endpoints"]} == {
        str(world.a.endpoint), str(world.everyone)}
    assert snapshot(db_url) == before


def test_dead_list_scoped_to_a_tenant(db_url: str, world: World) -> None:
    done = invoke(db_url, "dead", "list", "--tenant", A, "--json")
    assert done.exit_code == 0, done.output
    assert {r["id"] for r in json.loads(done.stdout)} == set(world.a.dead)
    other = invoke(db_url, "dead", "list", "--tenant", B, "--endpoint", str(world.everyone),
                   "--json")
    assert {r["id"] for r in json.loads(other.stdout)} == {
        i for i in world.b.dead if i in delivery_ids(db_url, "endpoint_id = %s",
                                                      (world.everyone,))}


def test_prune_scoped_to_a_tenant_deletes_only_its_rows(db_url: str, world: World) -> None:
    before = _others(db_url)
    done = invoke(db_url, "prune", "--tenant", A, "--older-than", "1d", "--batch-size", "1",
                  "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert (result["deliveries"], result["attempts"], result["events"]) == (2, 6, 1)
    assert delivery_ids(db_url, "id = ANY (%s)", (world.a.old,)) == []
    assert execute(db_url, f"SELECT 1 FROM {SCHEMA}.events WHERE id = %s", (world.a.orphan,)) == []
    assert _others(db_url) == before
    # the unscoped prune still takes everyone's
    assert json.loads(invoke(db_url, "prune", "--older-than", "1d", "--json").stdout)[
        "deliveries"] == 4


def test_stats_scoped_to_a_tenant(db_url: str, world: World) -> None:
    done = invoke(db_url, "stats", "--tenant", A, "--json")
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    figures = {e["endpoint_id"]: (e["pending"], e["due"], e["dead_1h"])
               for e in data["endpoints"]}
    # acme's endpoint and the all-tenants one, each counting acme's rows only
    assert figures == {str(world.a.endpoint): (1, 1, 2), str(world.everyone): (1, 1, 2)}
    assert data["due"]["due"] == 2
    assert [(t["tenant"], t["due"]) for t in data["tenants"]] == [(A, 2)]


def test_stats_top_tenants(db_url: str, world: World) -> None:
    data = json.loads(invoke(db_url, "stats", "--json").stdout)
    tenants = [(t["tenant"], t["due"]) for t in data["tenants"]]
    # most due first; a tie goes to the longest wait (acme's events were emitted first)
    assert tenants == [(B, 4), (A, 2), (None, 2)]
    assert all(t["oldest_due_seconds"] >= 0 for t in data["tenants"])
    table = invoke(db_url, "stats").stdout.split("top tenants by due backlog")[1]
    rows = [line.split() for line in table.splitlines()[2:]]
    assert [r[:2] for r in rows] == [[B, "4"], [A, "2"], ["-", "2"]]


def test_top_tenants_limit_and_scope(db_url: str, conn: psycopg.Connection[Any],
                                     world: World) -> None:
    assert [t.tenant for t in st.top_tenants(conn, schema=SCHEMA, limit=1)] == [B]
    assert st.top_tenants(conn, schema=SCHEMA, tenant="nobody") == []
    with pytest.raises(ValueError, match="limit"):
        st.top_tenants(conn, schema=SCHEMA, limit=0)


# --- every command: --tenant or a conscious exemption ------------------------------------

# Commands that need no --tenant, and why. A new command must either accept --tenant or be
# added here on purpose.
EXEMPT = {
    "migrate": "schema only, no tenant data",
    "partitions": "operator-only: a partition holds every tenant's deliveries, so it is "
                  "listed (and dropped) whole; it shows sizes and states, no tenant's rows",
    "worker": "delivers every tenant's due work, fairly; a per-tenant worker would starve "
              "the rest",
    "demo": "its own throwaway endpoint and events",
    "secrets generate-key": "no database",
    "secrets reencrypt": "re-seals every endpoint's secret under the current key: all or none",
    "endpoints show": "takes one endpoint id: the id is the scope",
    "endpoints test-filter": "takes one endpoint id: the id is the scope; reads only (the"
                             " portal's route is the tenant-scoped one)",
    "endpoints update": "takes one endpoint id: the id is the scope",
    "endpoints disable": "takes one endpoint id",
    "endpoints enable": "takes one endpoint id",
    "endpoints rotate-secret": "takes one endpoint id",
    "endpoints ping": "takes one endpoint id",
    "dead show": "takes one delivery id",
    "dead skip": "takes delivery ids: the ids are the scope (the library's skip() also takes "
                 "tenant=, tests/integration/test_ordered.py)",
    "inbox prune": "the receiving side's dedupe ids: received webhooks carry no tenant",
    "types add": "the event catalog is global: --offer-to names the tenants whose portal "
                 "shows the type; each portal sees only what it is offered "
                 "(tests/web/test_isolation.py)",
    "types update": "one type by name: the name is the scope (--offer-to as for add)",
    "types list": "the global catalog (the portal shows a tenant what it is offered)",
    "types show": "one type by name",
    "types deprecate": "one type by name",
    "types remove": "one type by name",
    "types publish": "the process's registered pydantic models: the global catalog",
    "types export": "the global catalog as a document for receivers",
    "capture add": "schema DDL on one application table (a trigger): --tenant-column names "
                   "the column that gives each captured event its tenant",
    "capture list": "the installed triggers: schema, no tenant data",
    "capture remove": "drops one table's trigger: the table is the scope",
    "serve": "serves every tenant: operators by admin token; each portal session is scoped "
             "to its link's tenant (tests/web/test_isolation.py)",
}

# How to run each --tenant command, scoped to acme: read-only modes, and the modes that
# change rows. A --tenant command missing here fails test_every_scoped_command_is_exercised.
READ_ONLY: dict[str, list[list[str]]] = {
    "endpoints list": [[], ["--json"]],
    "dead list": [[], ["--json"], ["--limit", "0"]],
    "replay": [["--all", "--dry-run"], ["--all", "--dry-run", "--json"],
               ["--event-type", "invoice.paid", "--dry-run"]],
    "stats": [[], ["--json"], ["--json", "--watch", "0.2", "--iterations", "2"]],
}
CHANGING: dict[str, list[list[str]]] = {
    "endpoints add": [[BASE + "acme-2"]],
    "replay": [["--all"], ["--all", "--batch-size", "1"]],
    "prune": [["--older-than", "1d", "--dead-too"], ["--older-than", "1m", "--batch-size", "1"]],
}
# --tenant commands that read and write no tenant data: they mint something for the tenant.
NO_DATA: dict[str, str] = {
    "portal-link": "signs a link to the tenant's portal (tests/web/test_portal_link.py)",
}
ENV = {"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8", "OUTBOX_WEB_SECRET": "s" * 32}


def _leaf_commands() -> dict[str, click.Command]:
    load_commands()
    found: dict[str, click.Command] = {}

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = command

    walk(cli, [])
    return found


def _scoped() -> list[str]:
    return sorted(name for name, command in _leaf_commands().items()
                  if any("--tenant" in p.opts for p in command.params))


def test_every_command_accepts_tenant_or_is_exempt() -> None:
    commands = _leaf_commands()
    missing = sorted(set(commands) - set(_scoped()) - set(EXEMPT))
    assert not missing, f"add --tenant to these commands, or exempt them on purpose: {missing}"
    stale = sorted(name for name in EXEMPT if name not in commands or name in _scoped())
    assert not stale, f"exemptions for commands that are gone or now scoped: {stale}"


def test_every_scoped_command_is_exercised() -> None:
    assert set(_scoped()) == set(READ_ONLY) | set(CHANGING) | set(NO_DATA)


@pytest.mark.parametrize(("name", "args"), [(n, a) for n in READ_ONLY for a in READ_ONLY[n]],
                         ids=str)
def test_read_only_scoped_output_shows_nothing_of_another_tenant(
        db_url: str, world: World, name: str, args: list[str]) -> None:
    before = snapshot(db_url)
    done = invoke(db_url, *name.split(), "--tenant", A, *args)
    assert done.exit_code == 0, done.output
    leaked = [m for m in world.b.foreign_marks + world.none.foreign_marks if m in done.output]
    assert not leaked, done.output
    assert any(m in done.output for m in world.a.foreign_marks), done.output  # not vacuous
    assert snapshot(db_url) == before


@pytest.mark.parametrize(("name", "args"), [(n, a) for n in CHANGING for a in CHANGING[n]],
                         ids=str)
def test_changing_scoped_command_leaves_another_tenant_unchanged(
        db_url: str, world: World, name: str, args: list[str]) -> None:
    before = _others(db_url)
    done = invoke(db_url, *name.split(), "--tenant", A, *args, env=ENV)
    assert done.exit_code == 0, done.output
    leaked = [m for m in world.b.foreign_marks + world.none.foreign_marks if m in done.output]
    assert not leaked, done.output
    assert _others(db_url) == before


BAD = [("", "non-empty"), ("t" * 129, "over 128"), ("a\tb", "control"), ("\x1b[2J", "control")]


@pytest.mark.parametrize(("name", "args"), [
    *[(n, a[0]) for n, a in READ_ONLY.items()], *[(n, a[0]) for n, a in CHANGING.items()],
    *[(n, []) for n in NO_DATA]],
    ids=str)
@pytest.mark.parametrize(("tenant", "message"), BAD, ids=["empty", "129", "tab", "escape"])
def test_bad_tenant_is_refused_and_writes_nothing(
        db_url: str, world: World, name: str, args: list[str], tenant: str,
        message: str) -> None:
    before = snapshot(db_url)
    done = invoke(db_url, *name.split(), "--tenant", tenant, *args, env=ENV)
    assert done.exit_code == 1, done.output
    assert done.stderr.startswith("error: tenant") and message in done.stderr, done.stderr
    assert "Traceback" not in done.output
    assert snapshot(db_url) == before


@pytest.mark.parametrize(("tenant", "message"), BAD, ids=["empty", "129", "tab", "escape"])
def test_library_refuses_a_bad_tenant_before_any_sql(
        db_url: str, world: World, tenant: str, message: str) -> None:
    before = snapshot(db_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        for call in (
            lambda: rp.replay(c, schema=SCHEMA, selection=dl.Selection(tenant=tenant)),
            lambda: st.snapshot(c, schema=SCHEMA, tenant=tenant),
            lambda: st.due_summary(c, schema=SCHEMA, tenant=tenant),
            lambda: retention.prune(c, SCHEMA, dt.timedelta(0), dead_too=True, tenant=tenant),
        ):
            with pytest.raises(InvalidEvent, match=message):
                call()
    assert snapshot(db_url) == before


# --- cost: scoped statements read the partial indexes and probe events by primary key ----


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


@pytest.fixture
def history(db_url: str) -> str:
    """50,000 delivered rows of 100 tenants 10 days old, a small backlog and dead set."""
    endpoint = add_endpoint(db_url, BASE + "x", all_tenants=True)
    execute(db_url, f"""
        WITH ev AS (
            INSERT INTO {SCHEMA}.events (id, type, payload, tenant)
            SELECT gen_random_uuid(), 'x', '{{}}', 't' || (i %% 100)
              FROM generate_series(1, 50100) i RETURNING id)
        INSERT INTO {SCHEMA}.deliveries (event_id, endpoint_id, state, finished_at)
        SELECT id, %s, CASE WHEN n <= 50000 THEN 'delivered' WHEN n <= 50050 THEN 'dead'
                            ELSE 'pending' END,
               CASE WHEN n <= 50050 THEN now() - interval '10 days' END
          FROM (SELECT id, row_number() OVER () AS n FROM ev) e""", (endpoint,))
    execute(db_url, f"ANALYZE {SCHEMA}.events; ANALYZE {SCHEMA}.deliveries")
    return db_url


_SELECTION = {"ids": None, "endpoint": None, "event_type": None, "since": None, "until": None,
              "tenant": "t7"}
_PRUNE = {"states": ["delivered", "dead"], "cutoff": dt.datetime.now(dt.UTC) - DAY,
          "limit": 1000, "tenant": "t7", "after_at": dt.datetime(1, 1, 1, tzinfo=dt.UTC),
          "after_id": 0, "below": 2**63 - 1}  # every row (a tenant's prune leaves none to drops)
PLANS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "STATS_TOP_TENANTS": ({"tenant": None, "limit": 10}, {"deliveries_due"}),
    "STATS_DUE": ({"tenant": "t7"}, {"deliveries_due"}),
    "STATS_BY_ENDPOINT": ({"tenant": "t7"}, {"deliveries_due", "deliveries_finished"}),
    "DEAD_PAGE": ({**_SELECTION, "limit": 50, "at": None, "after_id": None},
                  {"deliveries_dead_by_time|deliveries_dead_by_id|deliveries_dead"}),
    "REPLAY_BATCH": ({**_SELECTION, "limit": 1000, "after": 0, "actor": "t"},
                     {"deliveries_dead_by_id"}),
    "PRUNE_DELIVERIES_BATCH": (_PRUNE, {"deliveries_finished"}),
}
# (PRUNE_COUNT is left out: it counts every row past retention, which is the work prune
# is about to do; the planner may rightly scan for it.)


@pytest.mark.parametrize("name", PLANS)
def test_scoped_statement_reads_indexes_not_the_history(history: str, name: str) -> None:
    """With tenant t7 of 100 (stats: every tenant too), each statement walks its partial
    index (its size follows the backlog, the dead set or what is past retention) and reads
    events only by primary key: never a scan of deliveries or events."""
    params, indexes = PLANS[name]
    with psycopg.connect(history) as c:
        row = c.execute(("EXPLAIN (FORMAT JSON) " + render(getattr(queries, name), SCHEMA))
                        .encode(), params).fetchone()
        c.rollback()
    assert row is not None
    nodes = _nodes(row[0][0]["Plan"])
    # deliveries is partitioned (migrations/0018): its partitions' relations and indexes are
    # named deliveries_p<k>[_<index>] (deliveries_legacy: the converted table); an empty
    # partition (made ahead: cost 0) may be "scanned" for nothing
    part = re.compile(r"^deliveries_(p\d+|legacy)")
    scans = [(n["Node Type"], part.sub("deliveries", n.get("Index Name") or "") or None)
             for n in nodes
             if part.sub("deliveries", n.get("Relation Name") or "") in ("deliveries", "events")
             and not (n["Node Type"] == "Seq Scan" and n["Total Cost"] == 0)]
    assert not [s for s in scans if s[0] == "Seq Scan"], scans
    used = {s[1] for s in scans}
    assert all(used & set(either.split("|")) for either in indexes), scans  # a|b: either
    assert {i for t, i in scans if t != "Seq Scan" and i and i.startswith("events")} <= {
        "events_pkey"}, scans


def test_enable_endpoint_under_a_tenant_refuses_a_shared_endpoint(db_url: str,
                                                                  world: World) -> None:
    """Enabling the disabled all-tenants endpoint would make globex's parked rows due:
    under --tenant acme it is refused with nothing changed; acme's own endpoint is fine."""
    def parked() -> list[tuple[Any, ...]]:  # visible_at may be infinity: read it as text
        return execute(db_url, f"SELECT d.id, d.state, d.visible_at::text, p.enabled"
                               f" FROM {SCHEMA}.deliveries d JOIN {SCHEMA}.endpoints p"
                               " ON p.id = d.endpoint_id ORDER BY d.id")

    for endpoint in (world.everyone, world.a.endpoint):
        assert invoke(db_url, "endpoints", "disable", str(endpoint)).exit_code == 0
    before = parked()
    shared = invoke(db_url, "replay", "--tenant", A, "--all", "--enable-endpoint")
    assert shared.exit_code == 1, shared.output
    assert "every tenant's events" in shared.output and str(world.everyone) in shared.output
    assert parked() == before
    assert invoke(db_url, "endpoints", "enable", str(world.everyone)).exit_code == 0
    others = _others(db_url)
    own = invoke(db_url, "replay", "--tenant", A, "--all", "--enable-endpoint")
    assert own.exit_code == 0, own.output
    assert _others(db_url) == others
    assert _states(db_url, world.a.dead) == {"pending"}


def test_top_tenants_counts_the_oldest_10000_due_unless_scoped(db_url: str) -> None:
    """Unscoped, the view counts the head of the queue (oldest 10,000 due rows); scoped
    to a tenant, all of that tenant's due rows."""
    endpoint = add_endpoint(db_url, BASE + "all", all_tenants=True)
    execute(db_url, f"""
        WITH ev AS (INSERT INTO {SCHEMA}.events (id, type, payload, tenant)
                    SELECT gen_random_uuid(), 'x', '{{}}',
                           CASE WHEN g <= 6000 THEN 'acme' ELSE 'globex' END
                      FROM generate_series(1, 10005) g RETURNING id, tenant)
        INSERT INTO {SCHEMA}.deliveries (event_id, endpoint_id, visible_at)
        SELECT id, %s, now() - CASE WHEN tenant = 'acme' THEN interval '1 hour'
                                    ELSE interval '1 minute' END FROM ev""", (endpoint,))
    with psycopg.connect(db_url) as c:
        unscoped = {t.tenant: t.due for t in st.top_tenants(c, schema=SCHEMA)}
        scoped = {t.tenant: t.due for t in st.top_tenants(c, schema=SCHEMA, tenant=B)}
    assert unscoped == {A: 6000, B: 4000}
    assert scoped == {B: 4005}
