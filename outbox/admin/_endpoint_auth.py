"""An endpoint's static credentials: secret headers, an auth scheme (HTTP Basic or a bearer
token) and a TLS client certificate (docs/guides/endpoint-auth.md).

Guarantees:

- Every value is checked before any SQL; a refusal is :class:`~outbox.errors.InvalidEndpoint`
  whose message names the field and never contains the value (nor part of it).
- What is stored is sealed by the :class:`~outbox._security.secretbox.SecretBox` (each
  secret header's value on its own, the auth secret, the certificate and the key); in
  clear only the secret headers' names, the auth kind, and the certificate's subject and
  expiry, which is all an endpoint ever shows.
- The auth kind is one column (``auth_kind``: ``basic``, ``bearer``, or ``oauth2``, which
  another module stores) with its sealed secret in ``auth_secret``
  (migrations/0014_endpoint_auth.sql): one scheme per endpoint; setting one replaces the
  other.
- A header name is never both plain and secret (case-insensitive), and no header is named
  ``Authorization`` while the endpoint has auth: checked against the state the change
  leaves (:func:`check_conflicts`).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import ssl
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._destinations import is_broker
from outbox._security.secretbox import SecretBox
from outbox.admin.endpoint_options import (
    CREDENTIAL_MAX,
    PEM_MAX,
    CredentialChanges,
    EndpointCredentials,
    check_headers,
)
from outbox.errors import InvalidEndpoint

AUTH_KINDS = ("basic", "bearer", "oauth2")
_VISIBLE = re.compile(r"[\x21-\x7e]+")  # a bearer token: visible ASCII, no space
_BAD_TEXT = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class DeliveryCredentials:
    """An endpoint's credentials, opened, for sending (the worker, ping): never display
    (its repr shows only the auth kind)."""

    secret_headers: dict[str, str] = field(default_factory=dict, repr=False)
    auth_kind: str | None = None
    auth_secret: str | None = field(default=None, repr=False)
    tls_client_cert: str | None = field(default=None, repr=False)
    tls_client_key: str | None = field(default=None, repr=False)


def _auth(creds: EndpointCredentials) -> tuple[str, str] | None:
    """The (kind, secret) given, checked; None if neither basic_auth nor bearer_token."""
    for name in ("basic_auth", "bearer_token", "tls_client_cert", "tls_client_key"):
        if not isinstance(getattr(creds, name), str | None):
            raise InvalidEndpoint(f"{name} must be a string")
    if creds.basic_auth is not None and creds.bearer_token is not None:
        raise InvalidEndpoint("give basic_auth or bearer_token, not both (one auth scheme per"
                              " endpoint)")
    if creds.basic_auth is not None:
        user, sep, _ = creds.basic_auth.partition(":")
        if not sep or not user:
            raise InvalidEndpoint("basic_auth must be USER:PASSWORD (a user name, then a colon)")
        if len(creds.basic_auth) > CREDENTIAL_MAX or _BAD_TEXT.search(creds.basic_auth):
            raise InvalidEndpoint(f"basic_auth must be at most {CREDENTIAL_MAX} characters"
                                  " without control characters")
        return "basic", creds.basic_auth
    if creds.bearer_token is not None:
        token = creds.bearer_token
        if len(token) > CREDENTIAL_MAX or not _VISIBLE.fullmatch(token):
            raise InvalidEndpoint(f"bearer_token must be 1-{CREDENTIAL_MAX} visible ASCII"
                                  " characters (no space, no control character)")
        return "bearer", token
    return None


def _secret_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    try:
        checked = check_headers(headers)
    except ValueError as exc:
        raise InvalidEndpoint(f"secret {exc}") from None
    lowered = [name.lower() for name in checked]
    if len(set(lowered)) != len(lowered):
        raise InvalidEndpoint("secret_headers names a header twice (names ignore case)")
    return checked


def certificate(cert_pem: str, key_pem: str) -> tuple[str, dt.datetime]:
    """The subject and expiry of a client certificate whose private key is ``key_pem``;
    :class:`InvalidEndpoint` unless both are PEM, the key is unencrypted and matches the
    first certificate, the certificate has not expired, and OpenSSL loads the pair."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem.encode())
    except ValueError:
        raise InvalidEndpoint("tls_client_cert is not a PEM certificate (-----BEGIN"
                              " CERTIFICATE-----)") from None
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except TypeError:
        raise InvalidEndpoint("tls_client_key is encrypted: give it unencrypted (it is"
                              " stored sealed)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidEndpoint("tls_client_key is not a PEM private key (-----BEGIN PRIVATE"
                              " KEY-----)") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise InvalidEndpoint("tls_client_key does not belong to tls_client_cert (its first"
                              " certificate)")
    expires = chain[0].not_valid_after_utc
    if expires <= dt.datetime.now(dt.UTC):
        raise InvalidEndpoint(f"tls_client_cert expired at {expires.isoformat()}")
    try:
        client_context(cert_pem, key_pem)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidEndpoint(f"TLS cannot use this certificate and key: {exc.strerror or exc}"
                              ) from None
    return chain[0].subject.rfc4514_string()[:1000], expires


def client_context(cert_pem: str, key_pem: str) -> ssl.SSLContext:
    """A client ``SSLContext`` that verifies servers as the default one does (the system's
    CAs, or ``SSL_CERT_FILE``'s) and presents this certificate. The PEMs go to OpenSSL
    through an anonymous in-memory file (``memfd``) where there is one, else a private
    temporary file removed at once."""
    context = ssl.create_default_context()
    pem = (cert_pem.rstrip("\n") + "\n" + key_pem).encode()
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("outbox-client-cert", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return context
    with tempfile.NamedTemporaryFile() as tmp:  # mode 0600
        tmp.write(pem)
        tmp.flush()
        context.load_cert_chain(tmp.name)
    return context


def credential_params(creds: EndpointCredentials | None, box: SecretBox) -> dict[str, Any]:
    """The SQL parameters of ``creds`` (sealed), checked; the ``set_*`` flags say what
    :data:`~outbox._db.queries.ENDPOINT_UPDATE` replaces (``add`` stores them as given)."""
    creds = creds if creds is not None else EndpointCredentials()
    clear = creds if isinstance(creds, CredentialChanges) else CredentialChanges()
    auth = _auth(creds)
    if auth is not None and clear.clear_auth:
        raise InvalidEndpoint("give basic_auth/bearer_token or clear_auth, not both")
    headers = _secret_headers(creds.secret_headers)
    cert, key = creds.tls_client_cert, creds.tls_client_key
    if (cert is None) != (key is None):
        raise InvalidEndpoint("give tls_client_cert and tls_client_key together")
    if len(cert or "") > PEM_MAX or len(key or "") > PEM_MAX:
        raise InvalidEndpoint(f"tls_client_cert and tls_client_key must be at most {PEM_MAX}"
                              " characters each")
    if cert is not None and clear.clear_tls_client_cert:
        raise InvalidEndpoint("give tls_client_cert or clear_tls_client_cert, not both")
    subject, expires = certificate(cert, key) if cert is not None and key is not None else (
        None, None)
    return {
        "secret_headers": Jsonb({k: box.seal(v) for k, v in headers.items()}),
        "clear_secret_headers": clear.clear_secret_headers,
        "set_auth": auth is not None or clear.clear_auth,
        "auth_kind": auth[0] if auth else None,
        "auth_secret": box.seal(auth[1]) if auth else None,
        "set_tls": cert is not None or clear.clear_tls_client_cert,
        "tls_client_cert": box.seal(cert) if cert is not None else None,
        "tls_client_key": box.seal(key) if key is not None else None,
        "tls_client_cert_subject": subject, "tls_client_cert_expires_at": expires,
    }


def check_conflicts(plain: Iterable[str], secret: Iterable[str], auth_kind: str | None) -> None:
    """Refuse a header both plain and secret, or an ``Authorization`` header beside auth:
    ``plain``, ``secret``, ``auth_kind``: the endpoint's state after the change."""
    plain_names = {n.lower(): n for n in plain}
    for name in secret:
        if name.lower() in plain_names:
            raise InvalidEndpoint(f"header {name!r} is both a plain header and a secret one:"
                                  " give it once (drop the plain one to make it secret)")
    if auth_kind is not None:
        for name in (*plain_names.values(), *secret):
            if name.lower() == "authorization":
                raise InvalidEndpoint(f"header {name!r} conflicts with the endpoint's"
                                      f" {auth_kind} auth, which sets Authorization")


def after_change(params: Mapping[str, Any], current: tuple[Any, ...] | None
                 ) -> tuple[list[str], list[str], str | None]:
    """The plain header names, secret header names and auth kind an endpoint has after
    the change ``params`` (:func:`credential_params` plus ``headers``/``clear_headers``),
    from ``current`` (headers, secret header names, auth kind; None: a new endpoint)."""
    headers, names, kind = current if current is not None else ({}, [], None)
    plain = [] if params.get("clear_headers") else list(headers)
    secret = [] if params["clear_secret_headers"] else list(names)
    added = params["secret_headers"].obj
    plain += list(params["headers"].obj)
    secret = [n for n in secret if n not in added] + list(added)
    lowered = [n.lower() for n in secret]
    if len(set(lowered)) != len(lowered):
        raise InvalidEndpoint("secret header names would repeat (names ignore case): clear"
                              " the secret headers first (clear_secret_headers)")
    return plain, secret, params["auth_kind"] if params["set_auth"] else kind


def check_change(conn: psycopg.Connection[Any], schema: str, endpoint_id: Any,
                 params: Mapping[str, Any], url: str | None) -> None:
    """Refuse, before any write, a change that leaves a header conflict
    (:func:`check_conflicts`) or auth on a broker URL. A new endpoint (``endpoint_id``
    None) is checked against nothing; an existing one against its row, locked
    ``FOR UPDATE`` (the caller's transaction then writes it)."""
    current: tuple[Any, ...] | None = None
    adds = params["headers"].obj or params["secret_headers"].obj or params["auth_kind"]
    if endpoint_id is not None and (adds or params["set_tls"]):
        with translated(), conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(render(queries.ENDPOINT_AUTH_STATE_FOR_UPDATE, schema), (endpoint_id,))
            current = cur.fetchone()
        if current is None:
            return  # the update finds no row and says so
        url = url if url is not None else current[3]
        current = current[:3]
    if url is not None and is_broker(url) and (params["auth_kind"] or params["tls_client_cert"]):
        raise InvalidEndpoint("basic_auth, bearer_token and a TLS client certificate apply to"
                              " http(s) endpoints only (a broker URL has its own credentials)")
    if url is not None and params["tls_client_cert"] and url.lower().startswith("http://"):
        raise InvalidEndpoint("a TLS client certificate needs an https:// URL")
    check_conflicts(*after_change(params, current))


def open_all(row: tuple[Any, ...] | None, box: SecretBox) -> DeliveryCredentials:
    """The opened credentials of a :data:`~outbox._db.queries.ENDPOINT_AUTH_SECRETS` row."""
    if row is None:
        return DeliveryCredentials()
    headers, kind, secret, cert, key = row
    return DeliveryCredentials(
        secret_headers={k: box.open(str(v)) for k, v in (headers or {}).items()},
        auth_kind=kind, auth_secret=box.open(secret) if secret else None,
        tls_client_cert=box.open(cert) if cert else None,
        tls_client_key=box.open(key) if key else None)


def one_scheme(auth_kind: str | None, oauth2_token_url: str | None) -> None:
    """Refuse two auth schemes on one endpoint (both set the ``Authorization`` header);
    the database's endpoints_one_auth_scheme CHECK backs this up."""
    if auth_kind is not None and oauth2_token_url is not None:
        raise InvalidEndpoint(f"the endpoint would have both {auth_kind} auth and OAuth2: give"
                              " one (clear_auth / --no-auth or clear_oauth2 / --no-oauth2"
                              " removes the other)")
