"""Destination URLs: an endpoint's scheme says where its deliveries go. Pure: no I/O.

=================  =====================================================================
scheme             destination
=================  =====================================================================
http, https        a webhook receiver (a signed POST)
amqp, amqps        RabbitMQ: ``amqp://user:pass@host:port/vhost?exchange=X&routing_key=K``
nats               NATS JetStream: ``nats://user:pass@host:port?subject=S``
redis, rediss      Redis Streams: ``redis://user:pass@host:port/db?stream=S&maxlen=N``
=================  =====================================================================

Kafka, SQS and Pub/Sub would be one more row here (scheme, default port, options) and one
more module under ``outbox.delivery.transports``; none ships until it is tested against a
real broker.

Credentials (``user:pass@``) are accepted in broker URLs only. They are never stored in
the endpoint's ``url``: :func:`split_credentials` takes them out at registration, they
are sealed like signing secrets (``endpoints.url_credentials``), and the worker puts them
back (:func:`join_credentials`) only to connect. :func:`redact_url` hides a password in
anything shown or logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from outbox.errors import InvalidEndpoint

HTTP_SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443, "amqp": 5672, "amqps": 5671, "nats": 4222,
                 "redis": 6379, "rediss": 6379}
# scheme -> (broker family, TLS)
BROKER_SCHEMES = {"amqp": ("amqp", False), "amqps": ("amqp", True), "nats": ("nats", False),
                  "redis": ("redis", False), "rediss": ("redis", True)}
_OPTIONS = {"amqp": frozenset({"exchange", "routing_key"}), "nats": frozenset({"subject"}),
            "redis": frozenset({"stream", "maxlen"})}
_NAME_MAX = 255


@dataclass(frozen=True, slots=True)
class BrokerURL:
    """A parsed broker URL. ``vhost`` is AMQP's (``/`` by default), ``db`` Redis's (0 by
    default); ``options`` are the validated query parameters."""

    scheme: str
    family: str  # "amqp", "nats" or "redis"
    tls: bool
    host: str
    port: int
    username: str | None
    password: str | None
    vhost: str
    db: int
    options: dict[str, str]


def is_broker(url: str) -> bool:
    """True if ``url`` names a broker destination (by scheme), not an HTTP receiver."""
    return url.split(":", 1)[0].lower() in BROKER_SCHEMES


def parse_broker_url(url: str) -> BrokerURL:
    """``url`` parsed and validated, or :class:`InvalidEndpoint` saying what is wrong
    (never echoing a password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidEndpoint(f"destination URL is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in BROKER_SCHEMES:
        raise InvalidEndpoint(f"not a broker URL scheme: {scheme or 'none'!r}")
    family, tls = BROKER_SCHEMES[scheme]
    if not parts.hostname:
        raise InvalidEndpoint(f"{scheme} URL has no host")
    if parts.fragment:
        raise InvalidEndpoint(f"{scheme} URL must not contain a #fragment")
    if port == 0:
        raise InvalidEndpoint(f"{scheme} URL port must be 1-65535")
    options = _options(family, parts.query)
    vhost, db = _path(family, parts.path)
    return BrokerURL(
        scheme=scheme, family=family, tls=tls, host=parts.hostname,
        port=port or DEFAULT_PORTS[scheme],
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        vhost=vhost, db=db, options=options)


def _options(family: str, query: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise InvalidEndpoint(f"{family} URL query is malformed: {query!r}") from None
    options: dict[str, str] = {}
    for name, value in pairs:
        if name not in _OPTIONS[family]:
            known = ", ".join(sorted(_OPTIONS[family]))
            raise InvalidEndpoint(f"{family} URL option {name!r} is unknown (known: {known})")
        if name in options:
            raise InvalidEndpoint(f"{family} URL option {name!r} is given twice")
        if len(value) > _NAME_MAX or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise InvalidEndpoint(f"{family} URL option {name!r} is too long or has a"
                                  " control character")
        options[name] = value
    _check_options(family, options)
    return options


def _check_options(family: str, options: dict[str, str]) -> None:
    if family == "redis":
        if not options.get("stream"):
            raise InvalidEndpoint("redis URL needs ?stream=NAME (the stream to XADD to)")
        maxlen = options.get("maxlen")
        if maxlen is not None and (not maxlen.isdigit() or int(maxlen) < 1):
            raise InvalidEndpoint(f"redis URL maxlen must be a positive integer, got {maxlen!r}")
    subject = options.get("subject")
    if family == "nats" and subject is not None:
        tokens = subject.split(".")
        if not all(tokens) or any(t in ("*", ">") or " " in t for t in tokens):
            raise InvalidEndpoint(f"nats URL subject {subject!r} must be dot-separated names"
                                  " without spaces or wildcards")
    if family == "amqp" and "routing_key" in options and not options["routing_key"]:
        raise InvalidEndpoint("amqp URL routing_key is empty (leave it out: the event type)")


def _path(family: str, path: str) -> tuple[str, int]:
    segment = path[1:] if path.startswith("/") else path
    if family == "amqp":
        if "/" in segment:
            raise InvalidEndpoint("amqp URL path is the vhost: one segment (%2F for '/')")
        return (unquote(segment) if segment else "/"), 0
    if family == "redis":
        if not segment:
            return "", 0
        if not segment.isdigit():
            raise InvalidEndpoint(f"redis URL path is the database number, got {segment!r}")
        return "", int(segment)
    if segment:
        raise InvalidEndpoint("nats URL takes no path (the subject is ?subject=)")
    return "", 0


def split_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:pass@`` part, and that part (still percent-encoded), or
    None. Only the netloc changes; the rest of the URL is kept byte for byte."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    return urlunsplit(parts._replace(netloc=hostport)), userinfo


def join_credentials(url: str, credentials: str | None) -> str:
    """``url`` with ``credentials`` (as :func:`split_credentials` returned them) put back."""
    if not credentials:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{credentials}@{parts.netloc}"))


def redact_url(url: str) -> str:
    """``url`` with its password (or a lone token) replaced by ``***``, for display."""
    try:
        parts = urlsplit(url)
        userinfo, at, hostport = parts.netloc.rpartition("@")
    except ValueError:
        return "<malformed URL>"
    if not at:
        return url
    user, colon, _password = userinfo.partition(":")
    shown = f"{user}:***" if colon else "***"
    return urlunsplit(parts._replace(netloc=f"{shown}@{hostport}"))


def quote_credentials(username: str, password: str | None = None) -> str:
    """A ``user:pass`` userinfo with both parts percent-encoded."""
    user = quote(username, safe="")
    return user if password is None else f"{user}:{quote(password, safe='')}"
