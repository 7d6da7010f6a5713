"""What every broker transport shares: the message, the publisher contract, the failure.

A transport module (``amqp``, ``nats``, ``redis``) exposes ``async def open_publisher(
target, address, timeout) -> Publisher``: one connected, authenticated publisher for one
destination, connecting to ``address`` (the address the SSRF guard checked). Its
:meth:`Publisher.publish` returns only once the broker has taken the message (a confirm,
a stream ack, an entry id) and raises :class:`~outbox.delivery.outcome.BrokerFailure` for a
refusal; any other exception is a transport failure. Both become a RETRY verdict through
the one verdict function (:func:`~outbox.delivery.outcome.classify_attempt`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


@dataclass(frozen=True, slots=True)
class Message:
    """One delivery as a broker message. ``body`` is the exact bytes that were signed;
    ``headers`` are the endpoint's custom headers, then the Standard Webhooks headers
    (``webhook-id`` = ``id``, ``webhook-timestamp``, ``webhook-signature``) and
    ``traceparent`` when the event had one."""

    id: str
    type: str
    body: bytes
    timestamp: int
    headers: Mapping[str, str]


class Publisher(Protocol):
    """A live connection (and channel) to one destination."""

    def is_open(self) -> bool:
        """False once the connection or channel is unusable (the next send reconnects)."""
        ...

    async def publish(self, message: Message) -> str:
        """Publish and wait for the broker's acceptance; a one-line receipt (stream and
        sequence, entry id...) for the attempt log."""
        ...

    async def close(self) -> None: ...


def message_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a broker message carries, from the webhook request's: the custom ones,
    the Standard Webhooks ones and ``traceparent`` (HTTP-only ones are dropped)."""
    dropped = {"accept-encoding", "content-type", "user-agent", "idempotency-key"}
    return {k: v for k, v in headers.items() if k.lower() not in dropped}
