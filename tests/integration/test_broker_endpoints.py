"""Registering broker destinations: URL validation, credentials sealed and never shown,
the SSRF check, the portal's refusal, and `outbox endpoints ping` for each broker."""

from __future__ import annotations

import json

import psycopg
import pytest

from outbox._security.secretbox import SecretBox, generate_key
from outbox._security.ssrf import parse_networks
from outbox.admin import endpoints as ep
from outbox.admin.secrets import reencrypt
from outbox.errors import InvalidEndpoint
from tests.support import brokers as b
from tests.support.cli import execute, invoke
from tests.support.pg import SCHEMA, count

LOOPBACK = {"OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8"}


@pytest.mark.parametrize(("url", "message"), [
    ("amqp://127.0.0.1/?exchange=a&exchange=b", "option 'exchange' is given twice"),
    ("amqp://127.0.0.1/?queue=x", "option 'queue' is unknown (known: exchange, routing_key)"),
    ("amqp://127.0.0.1/a/b", "path is the vhost: one segment"),
    ("amqp://127.0.0.1/?routing_key=", "routing_key is empty"),
    ("amqp://:0/", "has no host"),
    ("amqp://127.0.0.1:0/", "port must be 1-65535"),
    ("nats://127.0.0.1/path", "takes no path"),
    ("nats://127.0.0.1?subject=a.*", "without spaces or wildcards"),
    ("nats://127.0.0.1?subject=a..b", "without spaces or wildcards"),
    ("nats://127.0.0.1#frag", "must not contain a #fragment"),
    ("redis://127.0.0.1/0", "needs ?stream=NAME"),
    ("redis://127.0.0.1/x?stream=s", "path is the database number"),
    ("redis://127.0.0.1/0?stream=s&maxlen=0", "maxlen must be a positive integer"),
    ("redis://127.0.0.1/0?stream=s&maxlen=ten", "maxlen must be a positive integer"),
    ("redis://127.0.0.1/0?stream=s&x", "query is malformed"),
    ("redis://127.0.0.1/0?stream=s&x=1", "option 'x' is unknown"),
    ("kafka://127.0.0.1:9092", "must be absolute http:// or https:// (or amqp"),
    ("https://user:pw@example.com/hooks", "must not contain credentials"),
])
def test_bad_broker_urls_are_refused_and_nothing_is_written(db_url: str, url: str,
                                                            message: str) -> None:
    with (psycopg.connect(db_url, autocommit=True) as conn,
          pytest.raises(InvalidEndpoint) as caught):
        ep.add(conn, url, schema=SCHEMA)
    assert message in str(caught.value)
    assert count(db_url, "endpoints") == 0


def test_credentials_are_sealed_apart_and_never_shown(db_url: str) -> None:
    box = SecretBox(generate_key())
    url = "amqp://app:s3cr%40t-pass@127.0.0.1:5672/shop?exchange=events"
    with psycopg.connect(db_url, autocommit=True) as conn:
        created = ep.add(conn, url, schema=SCHEMA, box=box)
        eid = created.endpoint.id
        assert created.endpoint.url == "amqp://127.0.0.1:5672/shop?exchange=events"
        assert ep.url_credentials(conn, eid, schema=SCHEMA, box=box) == "app:s3cr%40t-pass"
        listed = [e.url for e in ep.list_all(conn, schema=SCHEMA)]
    ((stored, sealed),) = execute(db_url, f"SELECT url, url_credentials FROM {SCHEMA}.endpoints")
    assert stored == created.endpoint.url and listed == [stored]
    assert sealed.startswith("enc:v1:") and "s3cr" not in sealed
    shown = invoke(db_url, "endpoints", "list", "--json").stdout
    assert "s3cr" not in shown and "app" not in json.loads(shown)[0]["url"]


def test_a_new_url_replaces_the_credentials(db_url: str) -> None:
    box = SecretBox()
    with psycopg.connect(db_url, autocommit=True) as conn:
        eid = ep.add(conn, "redis://u:one@127.0.0.1/0?stream=a", schema=SCHEMA, box=box
                     ).endpoint.id
        ep.update(conn, eid, schema=SCHEMA, description="kept", box=box)
        assert ep.url_credentials(conn, eid, schema=SCHEMA, box=box) == "u:one"
        ep.update(conn, eid, schema=SCHEMA, url="redis://u:two@127.0.0.1/0?stream=a", box=box)
        assert ep.url_credentials(conn, eid, schema=SCHEMA, box=box) == "u:two"
        ep.update(conn, eid, schema=SCHEMA, url="redis://127.0.0.1/1?stream=a", box=box)
        assert ep.url_credentials(conn, eid, schema=SCHEMA, box=box) is None


def test_the_portal_cannot_register_a_broker(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        with pytest.raises(InvalidEndpoint, match="operator's to register"):
            ep.add(conn, "nats://example.com", schema=SCHEMA, tenant="acme",
                   allow_brokers=False)
        eid = ep.add(conn, "https://example.com/h", schema=SCHEMA, tenant="acme").endpoint.id
        with pytest.raises(InvalidEndpoint, match="operator's to register"):
            ep.update(conn, eid, schema=SCHEMA, url="redis://example.com/0?stream=s",
                      allow_brokers=False)
    assert count(db_url, "endpoints") == 1


@pytest.mark.parametrize("url", ["amqp://guest:guest@127.0.0.1/", "nats://localhost:4222",
                                 "redis://[::1]:6379/0?stream=s"])
def test_a_loopback_broker_needs_allow_networks(db_url: str, url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        with pytest.raises(InvalidEndpoint, match="set OUTBOX_ALLOW_NETWORKS to allow it"):
            ep.add(conn, url, schema=SCHEMA, allow_networks=())
        ep.add(conn, url, schema=SCHEMA, allow_networks=parse_networks("127.0.0.0/8,::1/128"))
    assert count(db_url, "endpoints") == 1


def _add(db_url: str, url: str) -> str:
    done = invoke(db_url, "endpoints", "add", url, env=LOOPBACK)
    assert done.exit_code == 0, done.output
    assert "guest:guest" not in done.output
    return str(json.loads(invoke(db_url, "endpoints", "list", "--json").stdout)[-1]["id"])


def test_cli_ping_publishes_to_each_broker(db_url: str) -> None:
    b.require()
    exchange, queue = b.unique("ex"), b.unique("q")
    b.run(b.amqp_queue(exchange, queue))
    stream, subject = b.unique("S"), b.unique("pings")
    b.run(b.nats_stream(stream, [subject]))
    rstream = b.unique("pings")
    ids = [_add(db_url, f"amqp://guest:guest@127.0.0.1/?exchange={exchange}"),
           _add(db_url, f"nats://127.0.0.1:4222?subject={subject}"),
           _add(db_url, f"redis://127.0.0.1:6379/0?stream={rstream}")]
    answers = [invoke(db_url, "endpoints", "ping", i, "--json", env=LOOPBACK) for i in ids]
    assert [a.exit_code for a in answers] == [0, 0, 0], [a.output for a in answers]
    pings = [json.loads(a.stdout) for a in answers]
    assert all(p["verdict"] == "delivered" and p["status"] is None for p in pings)
    got = [b.run(b.amqp_drain(queue)), b.run(b.nats_drain(stream)),
           b.run(b.redis_drain(rstream))]
    assert [[g.id for g in msgs] for msgs in got] == [[p["webhook_id"]] for p in pings]
    assert all(json.loads(msgs[0].body)["type"] == "outbox.ping" for msgs in got)
    text = invoke(db_url, "endpoints", "ping", ids[2], env=LOOPBACK)
    assert text.exit_code == 0 and ": accepted in " in text.stdout
    assert f"response:   stream {rstream} entry " in text.stdout
    assert len(b.run(b.redis_drain(rstream))) == 1


def test_cli_ping_of_a_refusing_broker_exits_1_with_the_reason(db_url: str) -> None:
    b.require("nats")
    eid = _add(db_url, f"nats://127.0.0.1?subject={b.unique('nobody')}")
    done = invoke(db_url, "endpoints", "ping", eid, env=LOOPBACK)
    assert done.exit_code == 1
    assert "no JetStream stream takes subject" in done.output


def test_reencrypt_reseals_broker_credentials(db_url: str) -> None:
    old, new = generate_key(), generate_key()
    with psycopg.connect(db_url, autocommit=True) as conn:
        eid = ep.add(conn, "nats://app:pw-123@127.0.0.1?subject=a", schema=SCHEMA,
                     box=SecretBox(old)).endpoint.id
        assert reencrypt(conn, schema=SCHEMA, box=SecretBox(f"{new},{old}")) == 1
    ((sealed,),) = execute(db_url, f"SELECT url_credentials FROM {SCHEMA}.endpoints")
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert ep.url_credentials(conn, eid, schema=SCHEMA, box=SecretBox(new)) == "app:pw-123"
    assert sealed.startswith("enc:v1:") and "pw-123" not in sealed
