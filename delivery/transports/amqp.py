"""RabbitMQ (AMQP 0-9-1) through aio-pika: ``amqp(s)://user:pass@host:port/vhost?exchange=X&routing_key=K``.

Each message is persistent (delivery mode 2), published ``mandatory`` on a channel in
publisher-confirm mode, so :meth:`AmqpPublisher.publish` returns only when the broker
confirmed it: a nack, or a message returned as unroutable (no queue bound for its
routing key), is ``broker_refused``; an unknown exchange closes the channel (RabbitMQ's
404) and is ``broker_refused`` too, the channel being reopened by the next delivery.
``message_id`` is the event id, ``type`` the event type, ``content_type``
``application/json``, ``timestamp`` the signing time; the Standard Webhooks headers
(and ``traceparent``, and the endpoint's custom headers) are message headers; the body
is the exact signed bytes. Exchange default: the default exchange (``""``, which routes
by queue name); routing key default: the event type.
"""

from __future__ import annotations

import datetime as dt

import aio_pika
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange

from outbox._destinations import BrokerURL
from outbox.delivery.outcome import BrokerFailure
from outbox.delivery.transports.base import Message


class AmqpPublisher:
    """One connection and one confirm-mode channel to one destination."""

    def __init__(self, target: BrokerURL, connection: AbstractConnection,
                 channel: AbstractChannel, exchange: AbstractExchange) -> None:
        self._connection = connection
        self._channel = channel
        self._exchange = exchange
        self._routing_key = target.options.get("routing_key")
        self._name = target.options.get("exchange", "")
        self._closed_by: str | None = None  # why the broker closed the channel
        channel.close_callbacks.add(self._on_close)

    def _on_close(self, _channel: object, exc: BaseException | None) -> None:
        if exc is not None and self._closed_by is None:
            self._closed_by = _reason(exc)

    def is_open(self) -> bool:
        return not (self._connection.is_closed or self._channel.is_closed)

    async def publish(self, message: Message) -> str:
        amqp_message = aio_pika.Message(
            message.body, message_id=message.id, type=message.type,
            content_type="application/json", headers=dict(message.headers),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            timestamp=dt.datetime.fromtimestamp(message.timestamp, dt.UTC))
        routing_key = self._routing_key or message.type
        try:
            await self._exchange.publish(amqp_message, routing_key, mandatory=True)
        except aiormq.exceptions.PublishError as exc:  # returned: unroutable
            reply = getattr(exc.frame, "reply_text", "returned")
            raise BrokerFailure("broker_refused", f"unroutable: {reply} (exchange"
                                f" {self._name or '(default)'!r}, routing key {routing_key!r})"
                                ) from None
        except aiormq.exceptions.DeliveryError as exc:  # nack
            raise BrokerFailure("broker_refused", f"nacked by the broker: {exc}") from None
        except aiormq.exceptions.ChannelClosed as exc:
            self._closed_by = self._closed_by or _reason(exc)
            raise BrokerFailure("broker_refused", f"channel closed: {_reason(exc)}") from None
        except aiormq.exceptions.ChannelInvalidStateError:  # closed under a concurrent publish
            raise BrokerFailure("broker_refused" if self._closed_by else "broker_connect",
                                f"channel closed: {self._closed_by or 'while publishing'}"
                                ) from None
        return f"confirmed by {self._name or '(default exchange)'} as {routing_key}"

    async def close(self) -> None:
        await self._connection.close()


def _reason(exc: BaseException) -> str:
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return text or type(exc).__name__


async def open_publisher(target: BrokerURL, address: str, timeout: float) -> AmqpPublisher:
    """Connect, authenticate, open a confirm-mode channel and look the exchange up."""
    try:
        connection = await aio_pika.connect(
            host=address, port=target.port, login=target.username or "guest",
            password=target.password if target.password is not None else "guest",
            virtualhost=target.vhost, ssl=target.tls, timeout=timeout,
            client_properties={"connection_name": "outbox"})
    except aiormq.exceptions.ProbableAuthenticationError as exc:
        raise BrokerFailure("broker_auth", f"login refused: {_reason(exc)}") from None
    except aiormq.exceptions.AMQPConnectionError as exc:
        raise BrokerFailure("broker_connect", f"cannot connect: {_reason(exc)}") from None
    try:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        name = target.options.get("exchange", "")
        exchange = (channel.default_exchange if not name
                    else await channel.get_exchange(name, ensure=False))
    except BaseException:
        await connection.close()
        raise
    return AmqpPublisher(target, connection, channel, exchange)
