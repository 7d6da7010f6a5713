"""Customer-portal links and the signed tokens behind the web sessions (stdlib only).

A portal link is ``{base_url}/portal/enter?token=...``: the token carries the tenant and
an expiry, signed with HMAC-SHA256 under a key derived from ``OUTBOX_WEB_SECRET`` (or,
when that is unset, ``OUTBOX_ADMIN_TOKEN``). Guarantees:

- **Unforgeable and scoped.** Changing any byte of a token (its tenant, its expiry) makes
  it invalid; a token signed for one purpose (a portal link) is never accepted for another
  (a session cookie): each purpose has its own derived key.
- **Expiring.** :func:`open_token` refuses a token past its expiry (:class:`InvalidToken`).
- **Stateless.** Nothing is written when a link is minted or opened; a link cannot be
  revoked before it expires except by changing the secret, which ends every session too.
- Bad input raises before anything is signed: a malformed tenant
  :class:`~outbox.errors.InvalidEvent`, an expiry outside 1 minute .. 30 days or a base URL
  that is not http(s) ``ValueError``, no secret configured, or one shorter than 32
  characters, :class:`~outbox.errors.ConfigurationError`.
- **Secret lifetime.** Links and sessions live as long as their secret: with neither
  ``OUTBOX_WEB_SECRET`` nor ``OUTBOX_ADMIN_TOKEN`` set, ``outbox serve`` signs with a
  one-off token, and every link and session it issued dies when it restarts.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from pydantic import Field, SecretStr, field_validator

from outbox._emit.event import check_tenant
from outbox._security.ssrf import parse_networks
from outbox.errors import ConfigurationError, OutboxError
from outbox.settings import Settings

__all__ = [
    "DEFAULT_BASE_URL",
    "LINK_MAX",
    "LINK_MIN",
    "MIN_SECRET_LENGTH",
    "InvalidToken",
    "PortalLink",
    "WebSettings",
    "check_secrets",
    "mint_link",
    "open_link",
    "open_token",
    "sign",
    "signing_key",
    "web_settings",
]

LINK_MIN = dt.timedelta(minutes=1)
LINK_MAX = dt.timedelta(days=30)
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
_TOKEN_MAX = 4096
MIN_SECRET_LENGTH = 32


class WebSettings(Settings):
    """The web interface's settings on top of the core ones.

    ``admin_token`` (``OUTBOX_ADMIN_TOKEN``): the operator's bearer token and login
    password; empty: no operator can sign in. ``web_secret`` (``OUTBOX_WEB_SECRET``): the
    signing key of portal links and session cookies (default: derived from the admin
    token, so changing the token also ends sessions and links).
    ``portal_allow_networks`` (``OUTBOX_PORTAL_ALLOW_NETWORKS``): the non-public networks a
    customer may register endpoints in through the portal; empty (the default): none,
    whatever ``OUTBOX_ALLOW_NETWORKS`` lets the operator (and the worker) reach.
    """

    admin_token: SecretStr = SecretStr("")
    web_secret: SecretStr = SecretStr("")
    portal_allow_networks: str = ""
    session_seconds: int = Field(default=12 * 3600, gt=0)
    portal_session_seconds: int = Field(default=4 * 3600, gt=0)
    max_body_bytes: int = Field(default=256 * 1024, gt=0)
    # The URL customers reach this app at (OUTBOX_PUBLIC_URL, e.g. https://hooks.example.com
    # /outbox): portal links made by the API without a base_url start with it. Empty: the
    # API requires base_url (a link is never built from the request's Host header).
    public_url: str = Field(default="", max_length=2048)


    @field_validator("portal_allow_networks")
    @classmethod
    def _check_portal_networks(cls, value: str) -> str:
        parse_networks(value)  # ValueError naming the bad item: refused at startup
        return value


class InvalidToken(OutboxError):
    """A signed token is malformed, tampered with, of another purpose, or expired."""


@dataclass(frozen=True, slots=True)
class PortalLink:
    """A minted link: the URL to hand the customer, its token and when it stops opening."""

    url: str
    token: str
    tenant: str
    expires_at: dt.datetime


def web_settings(settings: Settings | None = None) -> WebSettings:
    """``settings`` as :class:`WebSettings` (the web fields read from the environment when
    a plain :class:`Settings` is given)."""
    if isinstance(settings, WebSettings):
        return settings
    if settings is None:
        return WebSettings()
    return WebSettings(database_url=settings.database_url, **{
        k: v for k, v in settings.model_dump().items() if k != "database_url"})


def _master(settings: WebSettings) -> tuple[str, str]:
    """(setting name, value) of the secret every signing key derives from."""
    if settings.web_secret.get_secret_value():
        return "OUTBOX_WEB_SECRET", settings.web_secret.get_secret_value()
    return "OUTBOX_ADMIN_TOKEN", settings.admin_token.get_secret_value()


def check_secrets(settings: WebSettings, *, names: tuple[str, ...] = (
        "OUTBOX_ADMIN_TOKEN", "OUTBOX_WEB_SECRET")) -> None:
    """:class:`ConfigurationError` if any of the ``names`` settings is set but shorter than
    :data:`MIN_SECRET_LENGTH` characters (guessable offline from one signed token, or by
    trying tokens against the API). The message never contains the secret."""
    values = {"OUTBOX_ADMIN_TOKEN": settings.admin_token.get_secret_value(),
              "OUTBOX_WEB_SECRET": settings.web_secret.get_secret_value()}
    for name in names:
        if values[name] and len(values[name]) < MIN_SECRET_LENGTH:
            raise ConfigurationError(
                f"{name} is {len(values[name])} characters: use at least {MIN_SECRET_LENGTH}"
                " random ones, e.g. $(openssl rand -hex 32)")


def signing_key(settings: WebSettings, purpose: str) -> bytes:
    """The key for ``purpose`` ("portal-link", "session"...), or ConfigurationError."""
    _, master = _master(settings)
    if not master:
        raise ConfigurationError(
            "set OUTBOX_WEB_SECRET (or OUTBOX_ADMIN_TOKEN) to sign portal links and sessions")
    return hmac.new(master.encode(), b"outbox/" + purpose.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(claims: dict[str, Any], key: bytes, expires_at: float) -> str:
    """``claims`` and the expiry (unix seconds) as ``payload.signature``."""
    body = _b64(json.dumps({**claims, "exp": int(expires_at)}, separators=(",", ":"),
                           sort_keys=True).encode())
    mac = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(mac)}"


def open_token(token: str, key: bytes, *, now: float | None = None) -> dict[str, Any]:
    """The claims of a valid, unexpired token signed with ``key``; else InvalidToken."""
    if not isinstance(token, str) or not 0 < len(token) <= _TOKEN_MAX or token.count(".") != 1:
        raise InvalidToken("malformed token")
    body, mac = token.split(".")
    try:
        given = _unb64(mac)
        expected = hmac.new(key, body.encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(given, expected):
            raise InvalidToken("bad signature")
        claims = json.loads(_unb64(body))
    except (ValueError, UnicodeError) as exc:
        raise InvalidToken("malformed token") from exc
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int):
        raise InvalidToken("malformed token")
    if claims["exp"] <= (time.time() if now is None else now):
        raise InvalidToken("expired")
    return claims


def mint_link(tenant: str, *, settings: Settings | None = None,
              expires: dt.timedelta = dt.timedelta(hours=1),
              base_url: str = DEFAULT_BASE_URL) -> PortalLink:
    """A link that opens the portal of ``tenant`` until ``expires`` from now."""
    if tenant is None:
        raise ValueError("a portal link needs a tenant")
    check_tenant(tenant)
    if not LINK_MIN <= expires <= LINK_MAX:
        raise ValueError("a portal link expires after 1 minute to 30 days")
    parts = urlsplit(base_url)
    if (parts.scheme not in ("http", "https") or not parts.netloc or parts.query
            or parts.fragment or any(ord(c) <= 32 or ord(c) >= 127 for c in base_url)):
        raise ValueError(f"base URL {base_url!r} must be http(s)://host[:port][/path] "
                         "(ASCII, no spaces: IDN hosts in punycode)")
    web = web_settings(settings)
    key = signing_key(web, "portal-link")
    check_secrets(web, names=(_master(web)[0],))
    expires_at = dt.datetime.now(dt.UTC) + expires
    token = sign({"tenant": tenant}, key, expires_at.timestamp())
    url = f"{base_url.rstrip('/')}/portal/enter?{urlencode({'token': token})}"
    return PortalLink(url, token, tenant, expires_at.replace(microsecond=0))


def open_link(token: str, settings: WebSettings) -> str:
    """The tenant of a valid portal-link token; else :class:`InvalidToken`."""
    claims = open_token(token, signing_key(settings, "portal-link"))
    tenant = claims.get("tenant")
    if not isinstance(tenant, str):
        raise InvalidToken("malformed token")
    return tenant
