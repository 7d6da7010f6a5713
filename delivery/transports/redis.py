"""Redis Streams through redis-py (asyncio): ``redis(s)://user:pass@host:port/db?stream=S&maxlen=N``.

Each delivery is one ``XADD stream [MAXLEN ~ N] * webhook-id ID type TYPE timestamp TS
signature SIG payload BODY`` (plus ``traceparent`` when the event had one); the payload
field holds the exact signed bytes and ``signature`` the ``webhook-signature`` value, so
a consumer verifies ``{webhook-id}.{timestamp}.{payload}`` as for a webhook.
:meth:`RedisPublisher.publish` returns the entry id Redis assigned. ``maxlen`` trims
approximately (``~``: whole macro nodes, cheap); without it the stream is never trimmed
by outbox. An authentication failure is ``broker_auth``; a key of another type
(``WRONGTYPE``), or any other error reply, ``broker_refused``. One connection per
destination (``single_connection_client``), no client-side retries: a broken connection
is reopened by the next delivery with the transports' backoff.
"""

from __future__ import annotations

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.typing import EncodableT, FieldT

from outbox.delivery.outcome import BrokerFailure
from outbox.delivery.transports.base import Message
from outbox.destinations import BrokerURL


class RedisPublisher:
    """One Redis connection for one destination's stream."""

    def __init__(self, target: BrokerURL, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._stream = target.options["stream"]
        maxlen = target.options.get("maxlen")
        self._maxlen = int(maxlen) if maxlen else None
        self._broken = False

    def is_open(self) -> bool:
        return not self._broken

    async def publish(self, message: Message) -> str:
        fields: dict[FieldT, EncodableT] = {
            "webhook-id": message.id, "type": message.type,
            "timestamp": str(message.timestamp),
            "signature": message.headers.get("webhook-signature", ""),
            "payload": message.body,
        }
        traceparent = message.headers.get("traceparent")
        if traceparent:
            fields["traceparent"] = traceparent
        try:
            entry = await self._client.xadd(self._stream, fields, maxlen=self._maxlen,
                                            approximate=True)
        except redis.exceptions.ResponseError as exc:
            raise BrokerFailure("broker_refused", f"XADD {self._stream!r} refused: {exc}"
                                ) from None
        except BaseException:
            self._broken = True
            raise
        receipt = entry.decode() if isinstance(entry, bytes) else str(entry)
        return f"stream {self._stream} entry {receipt}"

    async def close(self) -> None:
        await self._client.aclose()


async def open_publisher(target: BrokerURL, address: str, timeout: float) -> RedisPublisher:
    """Connect and authenticate (``PING`` answers: the connection is usable)."""
    client = redis.asyncio.Redis(
        host=address, port=target.port, db=target.db, username=target.username,
        password=target.password, ssl=target.tls, socket_connect_timeout=timeout,
        single_connection_client=True, retry=Retry(NoBackoff(), 0),
        client_name="outbox")
    try:
        await client.ping()
    except redis.exceptions.AuthenticationError as exc:
        await client.aclose()
        raise BrokerFailure("broker_auth", f"login refused: {exc}") from None
    except redis.exceptions.ResponseError as exc:
        await client.aclose()
        auth = any(w in str(exc) for w in ("NOAUTH", "WRONGPASS", "NOPERM"))
        raise BrokerFailure("broker_auth" if auth else "broker_refused", str(exc)) from None
    except redis.exceptions.ConnectionError as exc:
        await client.aclose()
        raise BrokerFailure("broker_connect", f"cannot connect: {exc}") from None
    return RedisPublisher(target, client)
