"""An endpoint's delivery options and custom headers, defined once.

:class:`EndpointOptions` is the one definition of the per-endpoint overrides of the
worker's settings: their types, ranges and help. :mod:`outbox.admin.endpoints` validates
``add``/``update`` with it, the CLI builds its ``--option`` flags from its fields
(:func:`outbox.cli.params.delivery_options`), the JSON API's request bodies inherit it
(:mod:`outbox.web.models`), and the docs' limits table is its :func:`limits`. A new option
is a new field here (plus its column, its CHECK constraint and its SQL parameter).

Every number is finite and inside its documented range, so no value a caller can store
makes the worker compute a time it cannot write (``now() + 1e300 s``) or a timeout it
never reaches. The database enforces the same ranges (``migrations/0007_bounds.sql``).

Headers (:func:`check_headers`): names are RFC 7230 tokens of at most 128 characters;
values are printable ASCII (space and tab allowed inside, no control character, no
DEL, no non-ASCII), at most 4,096 characters; at most 32 headers. Names outbox sets itself
(``webhook-*``, ``content-type``, ``user-agent``...) and hop-by-hop or framing names
(``host``, ``content-length``, ``transfer-encoding``, ``connection``, ``te``, ``upgrade``,
``expect``, ``keep-alive``...) are refused: a receiver would see outbox's request changed
or a proxy would break it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

__all__ = [
    "CREDENTIAL_MAX",
    "HEADERS_MAX",
    "HEADER_NAME_MAX",
    "HEADER_VALUE_MAX",
    "PEM_MAX",
    "RATE_MAX",
    "RESERVED_HEADERS",
    "RESERVED_PREFIX",
    "SIGNATURES",
    "TEXT_PATTERN",
    "CredentialChanges",
    "EndpointCredentials",
    "EndpointOptions",
    "Headers",
    "Signature",
    "check_headers",
    "describe_errors",
    "limits",
]

HEADER_NAME_MAX = 128
RATE_MAX = 1_000_000
"""The highest rate limit (``rate_limit``, ``tenant_rate_limit``: requests per second, finite
and above 0) and burst (``rate_burst``: 1 or more) an endpoint takes, wherever it is set:
the library, the CLI, the API and the database's CHECKs (migrations/0022_rate_bounds.sql)."""
HEADER_VALUE_MAX = 4096
HEADERS_MAX = 32
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
_VALUE_BAD = re.compile(r"[^\x20-\x7e\t]")
# set by outbox on every delivery, or hop-by-hop / framing / routing (RFC 9110, 9112)
RESERVED_HEADERS = frozenset({
    "host", "content-length", "content-type", "content-encoding", "transfer-encoding",
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "expect",
    "proxy-authorization", "proxy-authenticate", "idempotency-key", "user-agent",
    "traceparent", "tracestate", "accept-encoding",
})
RESERVED_PREFIX = "webhook-"

_Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$",
                                        max_length=HEADER_NAME_MAX)]
_Value = Annotated[str, StringConstraints(pattern=r"^[\x20-\x7e\t]*$",
                                         max_length=HEADER_VALUE_MAX)]


def _checked_headers(headers: dict[str, str]) -> dict[str, str]:
    return check_headers(headers)


# Custom headers in a request body: the schema states what it can (token names, printable
# ASCII values, lengths, count), :func:`check_headers` the rest (reserved names).
Headers = Annotated[dict[_Name, _Value], Field(
    max_length=HEADERS_MAX, json_schema_extra={"propertyNames": {
        "pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", "maxLength": HEADER_NAME_MAX}}),
    AfterValidator(_checked_headers)]

# Text without control characters or lone surrogates (a tenant id), as a pattern of the
# characters allowed, written with the characters themselves: regex escapes such as
# \x00 or \u0000 are not understood by every JSON Schema tool.
TEXT_PATTERN = "^[ -~\u0080-\ud7ff\ue000-\uffff]+$"

_Seconds = Field(ge=0.001, allow_inf_nan=False, strict=True)


def _integral(value: Any) -> Any:
    """``19.0`` as ``19``: JSON Schema counts it an integer, so the API must take it (the
    check stays strict otherwise: ``true``, ``"5"`` and ``1.5`` are refused)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


_Integer = BeforeValidator(_integral)


class EndpointOptions(BaseModel):
    """Per-endpoint overrides of the worker's settings; ``None``: the worker's default
    (on update: unchanged). Unknown names are refused."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: Annotated[int | None, Field(
        ge=1, le=100, strict=True, description="Attempts before a delivery is dead",
        json_schema_extra={"default_setting": "OUTBOX_MAX_ATTEMPTS"}), _Integer] = None
    retry_base_seconds: Annotated[float | None, _Seconds, Field(
        le=86_400, description="First retry delay scale, seconds",
        json_schema_extra={"default_setting": "OUTBOX_RETRY_BASE_SECONDS"})] = None
    retry_cap_seconds: Annotated[float | None, _Seconds, Field(
        le=30 * 86_400, description="Longest retry delay, seconds",
        json_schema_extra={"default_setting": "OUTBOX_RETRY_CAP_SECONDS"})] = None
    timeout_seconds: Annotated[float | None, _Seconds, Field(
        le=3600, description="HTTP timeout of one attempt, seconds (kept below the lease)",
        json_schema_extra={"default_setting": "OUTBOX_HTTP_TIMEOUT_SECONDS",
                           "cli": "--timeout"})] = None
    max_in_flight: Annotated[int | None, Field(
        ge=1, le=10_000, strict=True,
        description="Requests in flight to this endpoint per worker process",
        json_schema_extra={"default_setting": "OUTBOX_ENDPOINT_MAX_IN_FLIGHT"}), _Integer] = None

    @classmethod
    def checked(cls, values: Mapping[str, Any]) -> EndpointOptions:
        """The options of ``values``, or ValueError with one line per bad option."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise ValueError(describe_errors(exc)) from None

    def given(self) -> dict[str, Any]:
        """The options that are set (not ``None``)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


# The longest basic_auth or bearer_token, and PEM text (a certificate chain, a key).
CREDENTIAL_MAX = 4096
PEM_MAX = 65_536
_WRITE_ONLY: dict[str, Any] = {"writeOnly": True}


class EndpointCredentials(BaseModel):
    """An endpoint's static credentials (docs/guides/endpoint-auth.md): sealed with
    ``OUTBOX_SECRET_KEY`` and never shown again (an endpoint shows only the secret headers'
    names, the auth kind and the client certificate's subject and expiry). Checked by
    :mod:`outbox.admin._endpoint_auth` (what each must look like, and that they agree with
    each other and with the plain headers). ``None``: not given (on update: unchanged)."""

    model_config = ConfigDict(extra="forbid")

    secret_headers: Annotated[Headers | None, Field(
        description="Headers whose values are secret (an API key): sent with every"
                    " delivery, shown by name only", json_schema_extra=_WRITE_ONLY)] = None
    basic_auth: Annotated[str | None, Field(
        max_length=CREDENTIAL_MAX, description="HTTP Basic auth, USER:PASSWORD",
        json_schema_extra=_WRITE_ONLY)] = None
    bearer_token: Annotated[str | None, Field(
        max_length=CREDENTIAL_MAX, description="Authorization: Bearer TOKEN",
        json_schema_extra=_WRITE_ONLY)] = None
    tls_client_cert: Annotated[str | None, Field(
        max_length=PEM_MAX, description="Mutual TLS: the client certificate (chain), PEM",
        json_schema_extra=_WRITE_ONLY)] = None
    tls_client_key: Annotated[str | None, Field(
        max_length=PEM_MAX, description="Mutual TLS: the client certificate's private key,"
                                        " PEM, unencrypted", json_schema_extra=_WRITE_ONLY)] = None

    def __repr_args__(self) -> Any:
        """Field names with ``[redacted]`` for every value given: a repr (a traceback, a
        log line, a test failure) never shows a credential."""
        for name, value in super().__repr_args__():
            yield name, value if value is None or isinstance(value, bool) else "[redacted]"


class CredentialChanges(EndpointCredentials):
    """:class:`EndpointCredentials` on update, and what to remove first: every secret
    header, the auth, the client certificate."""

    clear_secret_headers: Annotated[bool, Field(
        description="Drop every secret header first")] = False
    clear_auth: Annotated[bool, Field(description="Remove the Basic or bearer auth")] = False
    clear_tls_client_cert: Annotated[bool, Field(
        description="Remove the client certificate and key")] = False


def describe_errors(exc: ValidationError) -> str:
    """One readable line per error: ``name must be positive ... and at most N, got X`` for
    an option, ``name: what is wrong (got X)`` otherwise."""
    bounds = {limit["name"]: limit for limit in limits()}
    lines = []
    for err in exc.errors(include_url=False):
        name = ".".join(str(p) for p in err["loc"]) or "value"
        got = err.get("input")
        limit = bounds.get(name)
        if limit is not None:
            kind = "an integer" if limit["type"] == "integer" else "a finite number"
            low = "" if limit["min"] == 1 else f" (at least {limit['min']:g})"
            lines.append(f"{name} must be positive{low} and at most {limit['max']:g} ({kind}),"
                         f" got {got!r}")
            continue
        shown = "" if isinstance(got, Mapping) else f" (got {got!r})"
        lines.append(f"{name}: {err['msg'].lower()}{shown}")
    return "; ".join(lines)


def limits() -> list[dict[str, Any]]:
    """Each option's name, type, minimum, maximum, default setting and description."""
    out = []
    for name, field in EndpointOptions.model_fields.items():
        low = high = None
        for m in field.metadata:
            low = getattr(m, "ge", None) if getattr(m, "ge", None) is not None else low
            high = getattr(m, "le", None) if getattr(m, "le", None) is not None else high
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        kind = "integer" if "int" in str(field.annotation) else "number"
        out.append({"name": name, "type": kind, "min": low, "max": high,
                    "default": extra.get("default_setting"), "help": field.description})
    return out


def check_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """``headers`` as a plain dict, or ValueError naming the first bad header."""
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise ValueError("headers must be a mapping of name to value")
    if len(headers) > HEADERS_MAX:
        raise ValueError(f"{len(headers)} headers, over {HEADERS_MAX}")
    out: dict[str, str] = {}
    for name, value in headers.items():
        _check_name(name)
        if not isinstance(value, str):
            raise ValueError(f"header {name!r}: the value must be a string")
        if len(value) > HEADER_VALUE_MAX:
            raise ValueError(f"header {name!r}: the value is {len(value)} characters, over"
                             f" {HEADER_VALUE_MAX}")
        bad = _VALUE_BAD.search(value)
        if bad:
            raise ValueError(f"header {name!r} has a control character or a non-ASCII one"
                             f" ({bad.group()!r}) in its value")
        out[name] = value
    return out


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not _TOKEN.fullmatch(name) or len(name) > HEADER_NAME_MAX:
        raise ValueError(f"header name {name!r} is not a valid HTTP token (RFC 7230, 1-"
                         f"{HEADER_NAME_MAX} characters)")
    lowered = name.lower()
    if lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_PREFIX):
        raise ValueError(f"header {name!r} is set by outbox or by the transport and cannot"
                         " be overridden")


# --- signatures (docs/guides/signatures.md) -----------------------------------------------
#: How deliveries to an endpoint are signed: ``hmac`` (Standard Webhooks ``v1``, a shared
#: ``whsec_`` secret; the default) or ``ed25519`` (``v1a``, a key pair: receivers verify
#: with the ``whpk_`` public key). Chosen at registration (``--signature``, API and portal
#: field ``signature``); a rotation keeps the scheme.
SIGNATURES = ("hmac", "ed25519")
Signature = Literal["hmac", "ed25519"]
