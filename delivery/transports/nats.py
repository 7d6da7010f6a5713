"""NATS JetStream through nats-py: ``nats://user:pass@host:port?subject=S`` (a lone
``nats://token@host`` is a token).

Each message is published to JetStream with ``Nats-Msg-Id`` = the event id, so a stream
drops a re-publish of the same event within its duplicate window (JetStream's
``duplicate_window``, 2 minutes by default); :meth:`NatsPublisher.publish` returns only on
the stream's ack (a duplicate ack counts: the stream already holds the event). No stream
bound to the subject is ``broker_refused``. Headers: the Standard Webhooks ones,
``traceparent``, the endpoint's custom ones, ``Nats-Msg-Id`` and ``Content-Type``; the
body is the exact signed bytes. Subject default: the event type. nats-py's own reconnect
is off: a lost connection is reopened by the next delivery, with the transports' backoff.
"""

from __future__ import annotations

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from outbox._destinations import BrokerURL
from outbox.delivery.outcome import BrokerFailure
from outbox.delivery.transports.base import Message


class NatsPublisher:
    """One NATS connection and its JetStream context, for one destination."""

    def __init__(self, target: BrokerURL, client: Client, timeout: float) -> None:
        self._client = client
        self._js = client.jetstream(timeout=timeout)
        self._subject = target.options.get("subject")
        self._timeout = timeout

    def is_open(self) -> bool:
        return bool(self._client.is_connected)

    async def publish(self, message: Message) -> str:
        headers = {**message.headers, "Nats-Msg-Id": message.id,
                   "Content-Type": "application/json", "Outbox-Event-Type": message.type}
        subject = self._subject or message.type
        try:
            ack = await self._js.publish(subject, message.body, timeout=self._timeout,
                                         headers=headers)
        except nats.js.errors.NoStreamResponseError:
            raise BrokerFailure("broker_refused",
                                f"no JetStream stream takes subject {subject!r}") from None
        except nats.js.errors.APIError as exc:
            raise BrokerFailure("broker_refused", f"JetStream refused: {exc}") from None
        duplicate = " (duplicate)" if ack.duplicate else ""
        return f"stream {ack.stream} seq {ack.seq}{duplicate}"

    async def close(self) -> None:
        await self._client.close()


async def open_publisher(target: BrokerURL, address: str, timeout: float) -> NatsPublisher:
    """Connect and authenticate (user and password, or a token)."""
    host = f"[{address}]" if ":" in address else address
    token = target.username if target.password is None else None
    errors: list[Exception] = []

    async def record(exc: Exception) -> None:  # failures reach the delivery, not a log
        del errors[:-4]
        errors.append(exc)

    try:  # max_reconnect_attempts=1: one try (0 would mean forever), then NoServersError
        client = await nats.connect(
            servers=[f"nats://{host}:{target.port}"], name="outbox", allow_reconnect=False,
            max_reconnect_attempts=1, reconnect_time_wait=0,
            connect_timeout=max(1, round(timeout)),
            user=target.username if token is None else None, password=target.password,
            token=token, error_cb=record)
    except (nats.errors.Error, OSError) as exc:
        cause = errors[-1] if errors and isinstance(exc, nats.errors.NoServersError) else exc
        text = str(cause) or type(cause).__name__
        auth = "authorization" in text.lower() or "authentication" in text.lower()
        raise BrokerFailure("broker_auth" if auth else "broker_connect",
                            f"cannot connect: {text}") from None
    return NatsPublisher(target, client, timeout)
