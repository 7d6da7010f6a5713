"""The real brokers of the test machine, and consumers that read what outbox published.

RabbitMQ 127.0.0.1:5672 (guest/guest), NATS with JetStream 127.0.0.1:4222, Redis
127.0.0.1:6379; ``python3 deploy/dev.py test`` starts any that is not listening
(:func:`deploy.dev.ensure_brokers`). A test that needs a broker that is down fails
(:func:`require`), never skips. Every test names its own exchange, queue, stream and
subject (:func:`unique`), so tests never see each other's messages.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any

import aio_pika
import nats
import pytest
import redis.asyncio

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
NATS_URL = "nats://127.0.0.1:4222"
REDIS_URL = "redis://127.0.0.1:6379/0"
PORTS = {"amqp": 5672, "nats": 4222, "redis": 6379}


def require(*names: str) -> None:
    """Fail (not skip) the test unless each named broker accepts a TCP connection."""
    for name in names or tuple(PORTS):
        try:
            socket.create_connection(("127.0.0.1", PORTS[name]), timeout=2).close()
        except OSError as exc:
            pytest.fail(f"{name} is not listening on 127.0.0.1:{PORTS[name]} ({exc}); "
                        "`python3 deploy/dev.py test` starts it")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class Got:
    """One consumed message: its id, body bytes and headers/fields (as text)."""

    id: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


# --- RabbitMQ -------------------------------------------------------------------------

async def amqp_queue(exchange: str | None, queue: str, routing_key: str = "#") -> None:
    """Declare a durable ``queue`` (bound to a new topic ``exchange`` unless None)."""
    conn = await aio_pika.connect(AMQP_URL)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue, durable=True, auto_delete=False)
        if exchange is not None:
            ex = await ch.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
            await q.bind(ex, routing_key)


async def amqp_drain(queue: str, *, delete: bool = True) -> list[Got]:
    """Every message in ``queue`` now (acked), in queue order."""
    conn = await aio_pika.connect(AMQP_URL)
    out: list[Got] = []
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(queue, durable=True, auto_delete=False, passive=True)
        while (msg := await q.get(fail=False, no_ack=True)) is not None:
            out.append(Got(msg.message_id or "", msg.body,
                           {k: str(v) for k, v in (msg.headers or {}).items()},
                           {"type": msg.type, "content_type": msg.content_type,
                            "delivery_mode": int(msg.delivery_mode or 0),
                            "routing_key": msg.routing_key}))
        if delete:
            await q.delete(if_unused=False, if_empty=False)
    return out


async def amqp_delete_exchange(exchange: str) -> None:
    conn = await aio_pika.connect(AMQP_URL)
    async with conn:
        ch = await conn.channel()
        await ch.exchange_delete(exchange)


# --- NATS JetStream -------------------------------------------------------------------

async def nats_stream(stream: str, subjects: list[str]) -> None:
    nc = await nats.connect(NATS_URL)
    try:
        await nc.jetstream().add_stream(name=stream, subjects=subjects)
    finally:
        await nc.close()


async def nats_drain(stream: str, *, delete: bool = True) -> list[Got]:
    """Every message of ``stream``, in stream order."""
    nc = await nats.connect(NATS_URL)
    out: list[Got] = []
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            headers = dict(msg.headers or {})
            out.append(Got(headers.get("Nats-Msg-Id", ""), msg.data or b"", headers,
                           {"subject": msg.subject}))
        if delete:
            await js.delete_stream(stream)
    finally:
        await nc.close()
    return out


# --- Redis Streams --------------------------------------------------------------------

async def redis_drain(stream: str, *, delete: bool = True) -> list[Got]:
    """Every entry of ``stream``, in stream order (fields as bytes)."""
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = await client.xrange(stream)  # type: ignore[assignment]
        if delete:
            await client.delete(stream)
    finally:
        await client.aclose()
    out = []
    for entry_id, fields in entries:
        text = {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        out.append(Got(text.get("webhook-id", ""), fields[b"payload"], text,
                       {"entry": entry_id.decode()}))
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)
