"""outbox._destinations: broker URLs parsed, credentials split off and put back, redacted."""

from __future__ import annotations

import pytest

from outbox._destinations import (
    is_broker,
    join_credentials,
    parse_broker_url,
    quote_credentials,
    redact_url,
    split_credentials,
)
from outbox.errors import InvalidEndpoint


def test_amqp_defaults_and_options() -> None:
    t = parse_broker_url("amqp://127.0.0.1")
    assert (t.family, t.tls, t.port, t.vhost, t.username, t.password, t.options) == (
        "amqp", False, 5672, "/", None, None, {})
    t = parse_broker_url("amqps://u%40x:p%3Aw@mq.example:5673/shop%2Feu?exchange=e&routing_key=k")
    assert (t.tls, t.port, t.vhost, t.username, t.password) == (True, 5673, "shop/eu", "u@x",
                                                                 "p:w")
    assert t.options == {"exchange": "e", "routing_key": "k"}


def test_nats_and_redis() -> None:
    t = parse_broker_url("nats://tok@[::1]?subject=a.b")
    assert (t.host, t.port, t.username, t.password, t.options) == ("::1", 4222, "tok", None,
                                                                   {"subject": "a.b"})
    t = parse_broker_url("rediss://:pw@r.example/3?stream=s&maxlen=10")
    assert (t.tls, t.port, t.db, t.username, t.password) == (True, 6379, 3, None, "pw")
    assert t.options == {"stream": "s", "maxlen": "10"}


def test_split_join_and_redact_round_trip() -> None:
    url = "amqp://app:s%40cret@127.0.0.1:5672/v?exchange=x"
    stored, creds = split_credentials(url)
    assert (stored, creds) == ("amqp://127.0.0.1:5672/v?exchange=x", "app:s%40cret")
    assert join_credentials(stored, creds) == url
    assert split_credentials(stored) == (stored, None)
    assert redact_url(url) == "amqp://app:***@127.0.0.1:5672/v?exchange=x"
    assert redact_url("nats://token@h") == "nats://***@h"
    assert quote_credentials("a@b", "c:d") == "a%40b:c%3Ad"


def test_is_broker() -> None:
    assert is_broker("AMQP://h") and is_broker("redis://h/0?stream=s")
    assert not is_broker("https://h") and not is_broker("kafka://h")


@pytest.mark.parametrize("url", ["amqp://u:topsecret@h/?bad=1", "redis://u:topsecret@h/x",
                                 "nats://u:topsecret@h/p"])
def test_errors_never_echo_the_password(url: str) -> None:
    with pytest.raises(InvalidEndpoint) as caught:
        parse_broker_url(url)
    assert "topsecret" not in str(caught.value)
