"""OAuth2 client-credentials auth of an HTTP endpoint: its options, defined once.

:class:`OAuth2Options` is the one definition of the four options (types, lengths, help):
the CLI builds its ``--oauth2-*`` flags from its fields (:func:`outbox.cli.params.oauth2_flags`),
the JSON API's request bodies inherit it (:mod:`outbox.web.models`), the docs' options table
is :func:`fields`. :func:`oauth2_params` turns them into the SQL parameters of
:func:`outbox.admin.endpoints.add` / ``update``; every check runs before any SQL and raises
:class:`~outbox.errors.InvalidEndpoint` (nothing written):

- ``oauth2_token_url``, ``oauth2_client_id`` and ``oauth2_client_secret`` come together,
  or none of them (on update: an endpoint with OAuth2 may change any of them alone, one
  without needs all three); ``oauth2_scope`` needs them. ``clear_oauth2`` removes all four.
- The token URL is an absolute http(s) URL without credentials or fragment, at most 2,048
  characters, and passes the SSRF policy of endpoint URLs when ``allow_networks`` is given
  (the worker checks its addresses again at every connection, as for deliveries).
- The client id and secret are printable ASCII (RFC 6749 VSCHAR), 1-1,024 and 1-4,096
  characters; the scope is space-separated RFC 6749 scope tokens, at most 1,024 characters
  (an empty scope means none).
- OAuth2 applies to http(s) endpoints only, and the worker sets ``Authorization`` itself:
  a custom ``Authorization`` header is refused beside it.

The client secret is stored sealed by the box (``OUTBOX_SECRET_KEY``), like signing secrets,
and never read back by anything but the worker. The database holds the same rules
(``migrations/0015_endpoint_oauth2.sql``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import tuple_row
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._destinations import is_broker
from outbox._security.secretbox import SecretBox
from outbox._security.ssrf import (
    ALLOW_SETTING,
    BlockedAddress,
    IPNetwork,
    ResolutionFailed,
    check_url_sync,
)
from outbox.admin.endpoint_options import describe_errors
from outbox.errors import InvalidEndpoint

__all__ = [
    "CLIENT_ID_MAX",
    "CLIENT_SECRET_MAX",
    "SCOPE_MAX",
    "TOKEN_URL_MAX",
    "OAuth2Fields",
    "OAuth2Options",
    "client_secret",
    "fields",
    "oauth2_params",
]

TOKEN_URL_MAX = 2048
CLIENT_ID_MAX = 1024
CLIENT_SECRET_MAX = 4096
SCOPE_MAX = 1024
_VSCHAR = "^[ -~]+$"
_SCOPE = re.compile(r"[!#-\[\]-~]+( [!#-\[\]-~]+)*")
_NAMES = ("oauth2_token_url", "oauth2_client_id", "oauth2_client_secret")


class OAuth2Fields(BaseModel):
    """The OAuth2 client-credentials options of an endpoint, as fields (the API's request
    bodies inherit them); ``None``: not given (on update: unchanged)."""

    model_config = ConfigDict(extra="forbid")

    oauth2_token_url: Annotated[str | None, Field(
        max_length=TOKEN_URL_MAX, description="OAuth2 token endpoint (client credentials grant)",
        json_schema_extra={"metavar": "URL"})] = None
    oauth2_client_id: Annotated[str | None, Field(
        min_length=1, max_length=CLIENT_ID_MAX, pattern=_VSCHAR,
        description="OAuth2 client id", json_schema_extra={"metavar": "ID"})] = None
    oauth2_client_secret: Annotated[str | None, Field(
        min_length=1, max_length=CLIENT_SECRET_MAX, pattern=_VSCHAR,
        description="OAuth2 client secret: stored sealed, never shown again",
        json_schema_extra={"metavar": "SECRET", "writeOnly": True})] = None
    oauth2_scope: Annotated[str | None, Field(
        max_length=SCOPE_MAX, description="OAuth2 scope requested (space-separated)",
        json_schema_extra={"metavar": "SCOPE"})] = None


class OAuth2Options(OAuth2Fields):
    """:class:`OAuth2Fields` as the library takes them. Unknown names are refused."""

    @classmethod
    def checked(cls, values: Mapping[str, Any]) -> OAuth2Options:
        """The options of ``values``, or :class:`InvalidEndpoint` with one line per bad one
        (never the secret's value)."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise InvalidEndpoint(_redacted(describe_errors(exc), values)) from None

    def given(self) -> dict[str, str]:
        """The options that are set (not ``None``)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def __repr__(self) -> str:  # never the secret, in a traceback or a log line
        shown = {k: ("***" if k == "oauth2_client_secret" else v)
                 for k, v in self.given().items()}
        return f"OAuth2Options({shown})"

    __str__ = __repr__


def fields() -> list[dict[str, str]]:
    """Each option's name, CLI flag, metavar and description (the docs' table)."""
    out = []
    for name, field in OAuth2Options.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        out.append({"name": name, "flag": "--" + name.replace("_", "-"),
                    "metavar": str(extra.get("metavar", "VALUE")),
                    "help": field.description or ""})
    return out


def client_secret(conn: psycopg.Connection[Any], endpoint_id: uuid.UUID, *, schema: str,
                  box: SecretBox) -> str | None:
    """The opened OAuth2 client secret of an endpoint, None if it has none (or no such
    endpoint). For sending (``ping``) only: never display it."""
    with translated(), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(render(queries.ENDPOINT_OAUTH2_SECRET, schema), (endpoint_id,))
        row = cur.fetchone()
    return box.open(str(row[0])) if row and row[0] else None


def _redacted(text: str, values: Mapping[str, Any]) -> str:
    secret = values.get("oauth2_client_secret")
    return text.replace(secret, "***") if isinstance(secret, str) and secret else text


def _token_url(url: str) -> str:
    if not url.strip():
        raise InvalidEndpoint("oauth2_token_url is empty")
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise InvalidEndpoint("oauth2_token_url contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidEndpoint(f"oauth2_token_url is malformed: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidEndpoint("oauth2_token_url must be an absolute http:// or https:// URL"
                              " with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidEndpoint("oauth2_token_url must not contain credentials (user:pass@):"
                              " give --oauth2-client-id and --oauth2-client-secret")
    if parts.fragment:
        raise InvalidEndpoint("oauth2_token_url must not contain a #fragment")
    if port == 0:
        raise InvalidEndpoint("oauth2_token_url port must be 1-65535")
    return url


def _scope(scope: str | None) -> str | None:
    if not scope:
        return None
    if not _SCOPE.fullmatch(scope):
        raise InvalidEndpoint("oauth2_scope must be scope tokens separated by single spaces"
                              " (printable ASCII without '\"' or '\\')")
    return scope


def _check_ssrf(url: str, allow_networks: Sequence[IPNetwork]) -> tuple[str, ...]:
    try:
        check_url_sync(url, allow_networks)
    except BlockedAddress as exc:
        raise InvalidEndpoint(f"oauth2_token_url {url} resolves to {exc.address} ({exc.reason});"
                              f" set {ALLOW_SETTING} to allow it") from None
    except ResolutionFailed as exc:
        return (f"oauth2_token_url: {exc}; registered anyway, the worker checks the address"
                " before each token request",)
    return ()


def oauth2_params(
    oauth2: OAuth2Options | None,
    *,
    box: SecretBox,
    url: str | None,
    headers: Mapping[str, str] | None,
    current: bool = False,
    clear: bool = False,
    allow_networks: Sequence[IPNetwork] | None = None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The SQL parameters of ``oauth2`` (the client secret sealed by ``box``) and the
    registration warnings of its token URL (see module doc for the checks).

    ``url``: the endpoint's URL (given or stored), ``headers``: the custom headers it will
    have; ``current``: the endpoint has OAuth2 already (update); ``clear``: remove it.
    Parameters ``None`` leave a column as it is (update), ``oauth2_clear`` removes all four.
    """
    given = oauth2.given() if oauth2 is not None else {}
    if clear and given:
        raise InvalidEndpoint("give OAuth2 options or clear_oauth2, not both")
    params: dict[str, Any] = {name: None for name in (*_NAMES, "oauth2_scope")}
    params["oauth2_clear"] = bool(clear)
    missing = [n for n in _NAMES if n not in given]
    if given and missing and not current:
        raise InvalidEndpoint(
            "OAuth2 needs oauth2_token_url, oauth2_client_id and oauth2_client_secret"
            f" together (missing: {', '.join(missing)})")
    if given or (current and not clear):
        _check_target(url, headers)
    if not given:
        return params, ()
    warnings: tuple[str, ...] = ()
    if "oauth2_token_url" in given:
        params["oauth2_token_url"] = _token_url(given["oauth2_token_url"])
        if allow_networks is not None:
            warnings = _check_ssrf(params["oauth2_token_url"], allow_networks)
    params["oauth2_client_id"] = given.get("oauth2_client_id")
    if "oauth2_client_secret" in given:
        params["oauth2_client_secret"] = box.seal(given["oauth2_client_secret"])
    if "oauth2_scope" in given:  # "" removes the scope
        params["oauth2_scope"] = _scope(given["oauth2_scope"]) or ""
    return params, warnings


def _check_target(url: str | None, headers: Mapping[str, str] | None) -> None:
    """OAuth2 is for an http(s) endpoint whose custom headers leave Authorization alone."""
    if url is not None and is_broker(url):
        raise InvalidEndpoint("OAuth2 applies to http(s) endpoints only, not to a broker URL")
    if headers and any(name.lower() == "authorization" for name in headers):
        raise InvalidEndpoint("header 'Authorization' cannot be set on an endpoint with OAuth2:"
                              " the worker sends the access token in it")
