"""Broker destinations: an endpoint whose URL is ``amqp(s)://``, ``nats://`` or
``redis(s)://`` is delivered by publishing, not by an HTTP POST.

:func:`~outbox.delivery.request.send_job` hands such a job to :meth:`Brokers.send`, which
returns the same :class:`~outbox.delivery.outcome.AttemptResult` as the HTTP sender, so
retries, dead letters, ordering, the circuit breaker, metrics and the attempt log work
alike. Guarantees of :meth:`Brokers.send`:

- A delivery is DELIVERED only once the broker accepted the message (RabbitMQ: a
  publisher confirm of a routed message; JetStream: the stream's ack; Redis: the XADD
  entry id). Anything else is a failed attempt, never an exception (as ``send``).
- One publisher (connection and channel) per process per destination (URL plus
  credentials), opened on first use and shared by concurrent deliveries. A publisher
  found broken is closed and reopened by the next delivery, but not before a jittered
  backoff (0.1 s doubling to 10 s, counted from the failures since the last acceptance):
  a delivery during the backoff fails at once with the last connect error, so a broker
  that is down or refuses the login costs one connect attempt per backoff window, not
  one per delivery, and holds no worker slot.
- The SSRF guard applies as for HTTP: the host is resolved and every address checked
  (``OUTBOX_ALLOW_NETWORKS``) before each connect, and the connection goes to the
  checked address (TLS schemes connect by name, for SNI and the certificate check, right
  after the check). A refusal is DEAD "ssrf".
- ``total_timeout`` bounds connecting and publishing together (RETRY "timeout").
- Credentials never appear in an error: the password is replaced by ``***``.

Adding Kafka, SQS or Pub/Sub: one row in :data:`outbox._destinations.BROKER_SCHEMES`
(scheme, default port, URL options), one module here exposing ``open_publisher``
(:mod:`.base`), its client as an extra in pyproject.toml, and a line in :data:`_MODULES`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import unquote

from outbox._destinations import BrokerURL, join_credentials, parse_broker_url
from outbox._security.ssrf import ip_literal
from outbox.delivery.jobs import Job
from outbox.delivery.outcome import AttemptResult, BrokerFailure, classify_attempt, delivered
from outbox.delivery.pinning import GuardedResolver
from outbox.delivery.transports.base import Message, Publisher, message_headers
from outbox.errors import InvalidEndpoint

# broker family -> (module, the extra that installs its client)
_MODULES = {"amqp": ("outbox.delivery.transports.amqp", "amqp"),
            "nats": ("outbox.delivery.transports.nats", "nats"),
            "redis": ("outbox.delivery.transports.redis", "redis")}
Opener = Callable[[BrokerURL, str, float], Awaitable[Publisher]]
BACKOFF_BASE = 0.1
BACKOFF_CAP = 10.0


def _opener(family: str) -> Opener:
    module, extra = _MODULES[family]
    try:
        opener: Opener = importlib.import_module(module).open_publisher
    except ImportError as exc:
        raise BrokerFailure("broker_client", f"{family}:// destinations need the {extra!r}"
                            f" extra (missing {exc.name}): pip install 'outbox[{extra}]'"
                            ) from None
    return opener


class Link:
    """The one publisher of one destination, reopened with backoff when it breaks."""

    def __init__(self, target: BrokerURL, resolver: GuardedResolver | None) -> None:
        self.target = target
        self._resolver = resolver
        self._publisher: Publisher | None = None
        self._lock = asyncio.Lock()
        self._failures = 0  # since the last acceptance: sets the reconnect backoff
        self._retry_at = 0.0
        self._last_error: BrokerFailure | None = None  # of the last connect

    async def publish(self, message: Message, timeout: float) -> str:
        publisher = self._publisher
        if publisher is None or not publisher.is_open():
            publisher = await self._connect(timeout)
        try:
            receipt = await publisher.publish(message)
        except BaseException as exc:
            self._failed()
            if not publisher.is_open():
                self._last_error = exc if isinstance(exc, BrokerFailure) else None
                await self._drop(publisher)
            raise
        self._failures = 0
        return receipt

    def _failed(self) -> None:
        self._failures += 1
        window = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(self._failures - 1, 16))
        self._retry_at = time.monotonic() + random.uniform(window / 2, window)

    async def _drop(self, publisher: Publisher) -> None:
        if self._publisher is publisher:
            self._publisher = None
        with contextlib.suppress(Exception):  # already broken: nothing more to release
            await publisher.close()

    async def _connect(self, timeout: float) -> Publisher:
        async with self._lock:
            current = self._publisher
            if current is not None and current.is_open():
                return current
            if current is not None:
                await self._drop(current)
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                last = self._last_error
                detail = f"{last}; " if last is not None else ""
                raise BrokerFailure(last.error_class if last else "broker_connect",
                                    f"{detail}reconnecting in {wait:.1f}s")
            opener = _opener(self.target.family)
            try:
                address = await self._pin()
                self._publisher = await opener(self.target, address, timeout)
            except BrokerFailure as exc:
                self._failed()
                self._last_error = exc
                raise
            except BaseException:
                self._failed()
                self._last_error = None
                raise
            self._last_error = None
            return self._publisher

    async def _pin(self) -> str:
        """The address to connect to, after the SSRF guard's check of the host."""
        host = self.target.host
        if self._resolver is None:
            return host
        self._resolver.check_literal(host)
        if ip_literal(host) is not None:
            return host
        resolved = await self._resolver.resolve(host, self.target.port)
        return host if self.target.tls else str(resolved[0]["host"])

    async def close(self) -> None:
        if self._publisher is not None:
            await self._drop(self._publisher)


class Brokers:
    """Every broker destination's :class:`Link` in this process (see module guarantees)."""

    def __init__(self, resolver: GuardedResolver | None = None) -> None:
        self.resolver = resolver
        self._links: dict[tuple[str, str | None], Link] = {}

    def link(self, url: str, credentials: str | None) -> Link:
        key = (url, credentials)
        link = self._links.get(key)
        if link is None:
            try:
                target = parse_broker_url(join_credentials(url, credentials))
            except InvalidEndpoint as exc:
                raise BrokerFailure("broker_url", str(exc)) from None
            link = self._links[key] = Link(target, self.resolver)
        return link

    async def send(self, url: str, credentials: str | None, message: Message, *,
                   total_timeout: float) -> AttemptResult:
        """Publish ``message`` to the destination once and classify the outcome."""
        started = time.perf_counter()
        failure: BaseException | None = None
        receipt = ""
        deadline = asyncio.timeout(total_timeout)
        try:
            async with deadline:
                receipt = await self.link(url, credentials).publish(message, total_timeout)
        except TimeoutError as exc:
            failure = exc
        except Exception as exc:
            failure = _redacted(exc, credentials)
        duration_ms = (time.perf_counter() - started) * 1000.0
        if failure is None:
            return delivered(duration_ms, receipt)
        return classify_attempt(None, _NO_HEADERS, b"", failure, expired=deadline.expired(),
                                total_timeout=total_timeout, duration_ms=duration_ms)

    async def aclose(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()


_NO_HEADERS: Mapping[str, str] = {}


def _redacted(exc: Exception, credentials: str | None) -> Exception:
    """``exc``, or a BrokerFailure with the same class and message minus the password."""
    secret = unquote(credentials.partition(":")[2]) if credentials else ""
    if len(secret) < 3 or secret not in str(exc):
        return exc
    error_class = exc.error_class if isinstance(exc, BrokerFailure) else "broker_connect"
    return BrokerFailure(error_class, f"{type(exc).__name__}: "
                         + str(exc).replace(secret, "***"))


def to_message(job: Job, body: bytes, headers: Mapping[str, str], timestamp: int) -> Message:
    """The broker message of ``job``: ``body`` and the signed webhook ``headers``."""
    return Message(id=job.webhook_id, type=job.event_type, body=body, timestamp=timestamp,
                   headers=message_headers(headers))
