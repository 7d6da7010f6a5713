"""outbox.testing.deliver_due: the real worker, in-process, until nothing is due; and the
receiver fixtures it delivers to."""

from __future__ import annotations

import http.client
import subprocess
import sys
import uuid

import psycopg
import pytest

import outbox
from outbox.admin.migrations import migrate
from outbox.errors import ConfigurationError
from outbox.signing import generate_secret, webhook_headers
from outbox.testing import Behaviour, Receiver, deliver_due
from tests.support.pg import SCHEMA, count


def _emit(url: str, n: int) -> list[uuid.UUID]:
    with psycopg.connect(url) as conn:
        ids = outbox.emit_many(conn, [outbox.Event("t.due", {"n": i}) for i in range(n)])
        conn.commit()
    return ids


def test_due_deliveries_arrive_signed_once(outbox_database_url: str, outbox_endpoint: uuid.UUID,
                                           outbox_receiver: Receiver) -> None:
    ids = _emit(outbox_database_url, 3)
    stats = deliver_due(outbox_database_url)
    assert (stats["claimed"], stats["delivered"], stats["retry"], stats["dead"]) == (3, 3, 0, 0)
    received = outbox_receiver.wait(3)
    assert sorted(r.webhook_id or "" for r in received) == sorted(str(i) for i in ids)
    assert all(r.signature_ok for r in received)
    assert [r.path for r in received] == ["/webhooks"] * 3
    assert count(outbox_database_url, "deliveries", "state = 'delivered'") == 3
    assert deliver_due(outbox_database_url)["claimed"] == 0  # nothing left due


def test_a_failure_is_scheduled_not_waited_for(outbox_database_url: str,
                                               outbox_endpoint: uuid.UUID,
                                               outbox_receiver: Receiver) -> None:
    outbox_receiver.script("/", [Behaviour(status=503)])
    _emit(outbox_database_url, 1)
    stats = deliver_due(outbox_database_url, retry_base_seconds=3600.0)
    assert (stats["delivered"], stats["retry"]) == (0, 1)
    assert count(outbox_database_url, "deliveries",
                 "state = 'pending' AND attempts = 1 AND visible_at > now()") == 1


def test_settings_apply_max_attempts_one_is_dead(outbox_database_url: str,
                                                 outbox_endpoint: uuid.UUID,
                                                 outbox_receiver: Receiver) -> None:
    outbox_receiver.script("/", [Behaviour(status=500)])
    _emit(outbox_database_url, 1)
    assert deliver_due(outbox_database_url, max_attempts=1)["dead"] == 1
    assert count(outbox_database_url, "deliveries", "state = 'dead'") == 1


def test_invalid_settings_are_refused_before_anything_runs(outbox_database_url: str,
                                                           outbox_endpoint: uuid.UUID) -> None:
    _emit(outbox_database_url, 1)
    with pytest.raises(ConfigurationError, match="http_timeout_seconds"):
        deliver_due(outbox_database_url, http_timeout_seconds=-1)
    with pytest.raises(ConfigurationError, match="lease"):
        deliver_due(outbox_database_url, http_timeout_seconds=60, lease_seconds=30)
    with pytest.raises(ConfigurationError, match=r"unknown worker setting.*max_attempt$"):
        deliver_due(outbox_database_url, max_attempt=1)
    assert count(outbox_database_url, "deliveries", "state = 'pending' AND attempts = 0") == 1


def test_the_schema_is_the_one_given(outbox_blank_database_url: str) -> None:
    with psycopg.connect(outbox_blank_database_url, autocommit=True) as conn:
        migrate(conn, "elsewhere")
    assert deliver_due(outbox_blank_database_url, schema="elsewhere")["claimed"] == 0
    with pytest.raises(outbox.OutboxError):
        deliver_due(outbox_blank_database_url, schema=SCHEMA)


def test_the_receiver_fixture_checks_the_secret(outbox_receiver: Receiver,
                                                outbox_webhook_secret: str) -> None:
    body = b'{"type":"t.ping","n":1}'
    for msg_id, secret in [("msg_ok", outbox_webhook_secret), ("msg_bad", generate_secret())]:
        connection = http.client.HTTPConnection("127.0.0.1", outbox_receiver.port, timeout=10)
        connection.request("POST", "/hook", body=body,
                           headers=webhook_headers([secret], msg_id, body))
        assert connection.getresponse().status == 200
        connection.close()
    got = [(r.webhook_id, r.type, r.signature_ok, r.json()["n"])
           for r in outbox_receiver.wait(2)]
    assert got == [("msg_ok", "t.ping", True, 1), ("msg_bad", "t.ping", False, 1)]


def test_wait_names_what_arrived_when_too_little_did(outbox_receiver: Receiver) -> None:
    with pytest.raises(AssertionError, match=r"expected 1 requests within 0.1 s .* got 0: \[\]"):
        outbox_receiver.wait(1, timeout=0.1)


def test_importing_outbox_testing_imports_neither_pytest_nor_the_worker() -> None:
    code = ("import sys, outbox, outbox.testing; from outbox.testing import *; "
            "bad = [m for m in sys.modules if m == 'pytest' or m.startswith('outbox.delivery')"
            " or m in ('aiohttp', 'psycopg_pool')]; print(bad)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"
