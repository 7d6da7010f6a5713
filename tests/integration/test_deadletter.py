"""`outbox dead list/show` and `outbox replay` against a real PostgreSQL (CliRunner)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass

import pytest

from tests.support.cli import delivery_ids, execute, invoke, kill, snapshot
from tests.support.pg import SCHEMA
from tests.support.workers import add_endpoint, emit

HOUR = dt.timedelta(hours=1)


@dataclass
class DeadSet:
    """Endpoint a: invoice.paid x2 dead 3h ago, user.created x1 dead 5m ago, x1 pending;
    endpoint b (invoice.paid only): invoice.paid x2 dead 5m ago."""

    a: uuid.UUID
    b: uuid.UUID
    a_old: list[int]
    a_user: int
    pending: int
    b_recent: list[int]

    @property
    def dead(self) -> set[int]:
        return {*self.a_old, self.a_user, *self.b_recent}


def _ids(db_url: str, endpoint: uuid.UUID, event_type: str) -> list[int]:
    return delivery_ids(
        db_url, f"endpoint_id = %s AND event_id IN (SELECT id FROM {SCHEMA}.events"
        " WHERE type = %s)", (endpoint, event_type))


@pytest.fixture
def dead_set(db_url: str) -> DeadSet:
    a = add_endpoint(db_url, "http://127.0.0.1:9/a")
    b = add_endpoint(db_url, "http://127.0.0.1:9/b", event_types=["invoice.paid"])
    emit(db_url, 2, "invoice.paid")
    emit(db_url, 2, "user.created")
    a_old, a_users, b_recent = (_ids(db_url, a, "invoice.paid"), _ids(db_url, a, "user.created"),
                                _ids(db_url, b, "invoice.paid"))
    kill(db_url, a_old, ago=3 * HOUR, error="HTTP 503", status=503, attempts=15)
    kill(db_url, [a_users[0]], error="connection refused", status=None, attempts=2)
    kill(db_url, b_recent, error="HTTP 400", status=400, attempts=1)
    return DeadSet(a, b, a_old, a_users[0], a_users[1], b_recent)


def _state(db_url: str) -> dict[int, tuple[object, ...]]:
    rows = execute(db_url, f"SELECT id, state, attempts, visible_at <= now(), lease_token,"
                           f" finished_at FROM {SCHEMA}.deliveries")
    return {int(r[0]): r[1:] for r in rows}


def test_dead_list_table_and_json(db_url: str, dead_set: DeadSet) -> None:
    done = invoke(db_url, "dead", "list")
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["delivery", "event", "type", "endpoint"]
    assert len(lines) == 1 + 5
    assert "http://127.0.0.1:9/b" in done.stdout and "HTTP 400" in done.stdout
    rows = json.loads(invoke(db_url, "dead", "list", "--json").stdout)
    assert {r["id"] for r in rows} == dead_set.dead
    assert [r["finished_at"] for r in rows] == sorted((r["finished_at"] for r in rows),
                                                      reverse=True)
    first_old = next(r for r in rows if r["id"] == dead_set.a_old[0])
    assert first_old["attempts"] == 15 and first_old["last_status"] == 503
    assert first_old["event_type"] == "invoice.paid"
    assert first_old["url"] == "http://127.0.0.1:9/a"
    assert first_old["last_error"] == "HTTP 503"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--endpoint", "{b}"], "b_recent"),
        (["--event-type", "user.created"], "a_user"),
        (["--since", "1h"], "recent"),
        (["--until", "1h"], "a_old"),
        (["--endpoint", "{a}", "--event-type", "invoice.paid"], "a_old"),
        (["--since", "4h", "--until", "2h"], "a_old"),
    ],
)
def test_dead_list_filters(db_url: str, dead_set: DeadSet, args: list[str],
                           expected: str) -> None:
    args = [x.format(a=dead_set.a, b=dead_set.b) for x in args]
    rows = json.loads(invoke(db_url, "dead", "list", "--json", *args).stdout)
    assert {r["id"] for r in rows} == _expected(dead_set, expected)


def _expected(s: DeadSet, name: str) -> set[int]:
    return {"b_recent": set(s.b_recent), "a_user": {s.a_user}, "a_old": set(s.a_old),
            "recent": {*s.b_recent, s.a_user}, "all": s.dead}[name]


def test_dead_list_limit(db_url: str, dead_set: DeadSet) -> None:
    assert len(json.loads(invoke(db_url, "dead", "list", "--json", "--limit", "2").stdout)) == 2
    assert len(json.loads(invoke(db_url, "dead", "list", "--json", "--limit", "0").stdout)) == 5


def test_dead_show(db_url: str, dead_set: DeadSet) -> None:
    delivery = dead_set.a_old[0]
    done = invoke(db_url, "dead", "show", str(delivery))
    assert done.exit_code == 0, done.output
    assert "state        dead" in done.stdout
    assert '"n": ' in done.stdout  # the payload, pretty-printed
    assert "attempt log (15):" in done.stdout
    data = json.loads(invoke(db_url, "dead", "show", str(delivery), "--json").stdout)
    assert data["id"] == delivery and data["state"] == "dead"
    assert json.loads(data["payload"])["n"] in (0, 1)
    assert [a["attempt"] for a in data["log"]] == list(range(1, 16))
    assert data["log"][-1]["outcome"] == "dead"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--id", "{a_old0}"], "a_old0"),
        (["--id", "{a_old0}", "--id", "{a_user}"], "a_old0+a_user"),
        (["--endpoint", "{b}"], "b_recent"),
        (["--event-type", "user.created"], "a_user"),
        (["--since", "1h"], "recent"),
        (["--until", "1h"], "a_old"),
        (["--endpoint", "{a}", "--since", "1h"], "a_user"),
        (["--all"], "all"),
    ],
)
def test_replay_by_each_selector(db_url: str, dead_set: DeadSet, args: list[str],
                                 expected: str) -> None:
    s = dead_set
    args = [x.format(a=s.a, b=s.b, a_old0=s.a_old[0], a_user=s.a_user) for x in args]
    want = ({s.a_old[0]} if expected == "a_old0" else
            {s.a_old[0], s.a_user} if expected == "a_old0+a_user" else _expected(s, expected))
    before = _state(db_url)
    done = invoke(db_url, "replay", *args)
    assert done.exit_code == 0, done.output
    assert f"replayed {len(want)} deliveries" in done.stdout
    after = _state(db_url)
    for delivery, row in after.items():
        if delivery in want:
            assert row == ("pending", 0, True, None, None), delivery
        else:
            assert row == before[delivery], delivery
    log = execute(db_url, f"SELECT delivery_id, attempt, outcome, error, worker FROM"
                          f" {SCHEMA}.delivery_attempts WHERE outcome = 'replayed'")
    assert {r[0] for r in log} == want
    assert all(r[1] == 0 and r[4].startswith("replay by ") for r in log)
    old = [r for r in log if r[0] == s.a_old[0]]
    assert not old or old[0][3] == "replayed after 15 attempts; was dead with: HTTP 503"
    assert execute(db_url, f"SELECT last_error, last_status FROM {SCHEMA}.deliveries"
                           " WHERE id = ANY(%s)", (list(want),)) == [(None, None)] * len(want)


def test_dry_run_changes_nothing(db_url: str, dead_set: DeadSet) -> None:
    before = snapshot(db_url)
    done = invoke(db_url, "replay", "--all", "--dry-run")
    assert done.exit_code == 0, done.output
    assert "would replay 5 dead deliveries to 2 endpoint(s)" in done.stdout
    assert str(dead_set.a) in done.stdout and str(dead_set.b) in done.stdout
    plan = json.loads(invoke(db_url, "replay", "--endpoint", str(dead_set.b), "--dry-run",
                             "--json").stdout)
    assert plan["total"] == 2 and plan["endpoints"][0]["count"] == 2
    assert snapshot(db_url) == before


def test_double_replay_makes_no_duplicate(db_url: str, dead_set: DeadSet) -> None:
    first = invoke(db_url, "replay", "--all", "--json")
    second = invoke(db_url, "replay", "--all", "--json")
    assert json.loads(first.stdout)["replayed"] == 5
    assert json.loads(second.stdout)["replayed"] == 0
    again_by_id = invoke(db_url, "replay", "--id", str(dead_set.a_user), "--json")
    assert json.loads(again_by_id.stdout)["replayed"] == 0
    assert execute(db_url, f"SELECT count(*), count(DISTINCT (event_id, endpoint_id)) FROM"
                           f" {SCHEMA}.deliveries") == [(6, 6)]
    assert execute(db_url, f"SELECT count(*) FROM {SCHEMA}.delivery_attempts"
                           " WHERE outcome = 'replayed'") == [(5,)]


def test_replay_leaves_a_row_a_worker_is_delivering_alone(db_url: str,
                                                          dead_set: DeadSet) -> None:
    target = dead_set.a_user
    assert invoke(db_url, "replay", "--id", str(target)).exit_code == 0
    token = uuid.uuid4()  # a worker claims it, as outbox.delivery.queries.CLAIM does
    execute(db_url, f"UPDATE {SCHEMA}.deliveries SET attempts = attempts + 1,"
                    " lease_token = %s, visible_at = now() + interval '60 seconds'"
                    " WHERE id = %s", (token, target))
    leased = _state(db_url)[target]
    for args in (["--id", str(target)], ["--all"], ["--event-type", "user.created"]):
        done = invoke(db_url, "replay", *args, "--json")
        assert done.exit_code == 0, done.output
    assert _state(db_url)[target] == leased
    assert leased[1] == 1 and leased[3] == token
    assert execute(db_url, f"SELECT count(*) FROM {SCHEMA}.delivery_attempts WHERE"
                           " delivery_id = %s AND outcome = 'replayed'", (target,)) == [(1,)]


def test_disabled_endpoint_is_refused_unless_enabled(db_url: str, dead_set: DeadSet) -> None:
    execute(db_url, f"UPDATE {SCHEMA}.endpoints SET enabled = false,"
                    " disabled_reason = 'receiver answered 410 Gone' WHERE id = %s",
            (dead_set.b,))
    before = snapshot(db_url)
    for extra in ([], ["--dry-run"]):
        done = invoke(db_url, "replay", "--all", *extra)
        assert done.exit_code == 1
        assert "error: refusing to replay onto disabled endpoint(s)" in done.stderr
        assert str(dead_set.b) in done.stderr and "410 Gone" in done.stderr
        assert "--enable-endpoint" in done.stderr
    assert snapshot(db_url) == before
    only_a = invoke(db_url, "replay", "--endpoint", str(dead_set.a), "--json")
    assert json.loads(only_a.stdout)["replayed"] == 3
    done = invoke(db_url, "replay", "--all", "--enable-endpoint")
    assert done.exit_code == 0, done.output
    assert f"enabled endpoint {dead_set.b}" in done.stdout
    assert "replayed 2 deliveries" in done.stdout
    assert execute(db_url, f"SELECT enabled FROM {SCHEMA}.endpoints WHERE id = %s",
                   (dead_set.b,)) == [(True,)]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "say what to replay"),
        (["--all", "--endpoint", "{a}"], 2, "drop the other selectors"),
        (["--since", "yesterday"], 2, "'yesterday' is neither a time ago"),
        (["--since", "-2h"], 2, "without a sign"),
        (["--since", "1h", "--until", "2h"], 2, "must be before --until"),
        (["--id", "-4"], 2, "-4"),
        (["--id", "abc"], 2, "'abc' is not a valid integer"),
        (["--id", "999999"], 1, "error: no delivery 999999"),
        (["--endpoint", "nope"], 1, "error: no endpoint 'nope'"),
        (["--all", "--batch-size", "0"], 2, "0"),
    ],
)
def test_replay_bad_arguments_change_nothing(db_url: str, dead_set: DeadSet, args: list[str],
                                             code: int, message: str) -> None:
    before = snapshot(db_url)
    done = invoke(db_url, "replay", *[x.format(a=dead_set.a) for x in args])
    assert done.exit_code == code, done.output
    assert message in done.stderr
    assert snapshot(db_url) == before


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["list", "--limit", "-1"], 2, "-1"),
        (["list", "--until", "soon"], 2, "'soon' is neither"),
        (["list", "--endpoint", "00000000-0000-0000-0000-00000000000g"], 1, "no endpoint"),
        (["show", "123456"], 1, "error: no delivery 123456"),
        (["show", "abc"], 1, "error: no delivery 'abc'"),
        (["show", "0"], 1, "error: no delivery 0"),
        (["show"], 2, "Missing argument"),
    ],
)
def test_dead_bad_arguments(db_url: str, dead_set: DeadSet, args: list[str], code: int,
                            message: str) -> None:
    done = invoke(db_url, "dead", *args)
    assert done.exit_code == code, done.output
    assert message in done.stderr
