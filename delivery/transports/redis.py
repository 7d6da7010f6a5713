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

Concurrent deliveries share that connection by pipelining: the XADDs that arrive while
one pipeline is in flight go out together as the next (``transaction=False``: each entry
succeeds or fails on its own), so one connection carries many deliveries per round trip.
A delivery that gives up waiting (its timeout) may still have been added: at least once,
as for any transport.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.typing import EncodableT, FieldT

from outbox._destinations import BrokerURL
from outbox.delivery.outcome import BrokerFailure
from outbox.delivery.transports.base import Message


class RedisPublisher:
    """One Redis connection for one destination's stream."""

    def __init__(self, target: BrokerURL, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._stream = target.options["stream"]
        maxlen = target.options.get("maxlen")
        self._maxlen = int(maxlen) if maxlen else None
        self._broken = False
        self._queued: list[tuple[dict[FieldT, EncodableT], asyncio.Future[Any]]] = []
        self._flusher: asyncio.Task[None] | None = None

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
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queued.append((fields, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        try:
            entry = await done
        except redis.exceptions.ResponseError as exc:
            raise BrokerFailure("broker_refused", f"XADD {self._stream!r} refused: {exc}"
                                ) from None
        receipt = entry.decode() if isinstance(entry, bytes) else str(entry)
        return f"stream {self._stream} entry {receipt}"

    async def _flush(self) -> None:
        """Send what is queued as pipelines, one at a time, until nothing is left."""
        while self._queued and not self._broken:
            batch, self._queued = self._queued, []
            pipe = self._client.pipeline(transaction=False)
            for fields, _ in batch:
                pipe.xadd(self._stream, fields, maxlen=self._maxlen, approximate=True)
            try:
                results = await pipe.execute(raise_on_error=False)
            except BaseException as exc:  # the connection is in doubt: reopen it
                self._broken = True
                _settle(batch, [exc] * len(batch))
                _settle(self._queued, [exc] * len(self._queued))
                self._queued = []
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return  # (each delivery got the error; nobody awaits this task)
            _settle(batch, results)

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        await self._client.aclose()


def _settle(batch: list[tuple[Any, asyncio.Future[Any]]], results: list[Any]) -> None:
    for (_, done), result in zip(batch, results, strict=True):
        if done.done():  # its delivery stopped waiting
            continue
        if isinstance(result, BaseException):
            done.set_exception(result if isinstance(result, Exception)
                               else ConnectionError("the Redis pipeline was cancelled"))
        else:
            done.set_result(result)


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
