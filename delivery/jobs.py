"""What a worker holds between claim and completion."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Job:
    """One claimed delivery: the lease token fences its completion."""

    delivery_id: int
    attempt: int
    token: uuid.UUID
    event_id: uuid.UUID
    event_type: str
    payload: str
    emitted_at: dt.datetime
    endpoint_id: uuid.UUID
    url: str
    enabled: bool
    secret: str
    previous_secret: str | None
    headers: dict[str, str]
    max_attempts: int | None
    retry_base_seconds: float | None
    retry_cap_seconds: float | None
    timeout_seconds: float | None
    max_in_flight: int | None = None
    traceparent: str | None = None  # W3C trace context of the emitting span
    credentials: str | None = None  # a broker URL's user:pass, opened (never logged)
    # The endpoint's credentials (outbox.admin._endpoint_auth), opened, never logged: secret
    # headers {name: value}, the auth kind and its secret, the TLS client cert and key (PEM).
    # (not in the repr: a job in a log line or a traceback shows none of them)
    secret_headers: dict[str, str] | None = field(default=None, repr=False)
    auth_kind: str | None = None
    auth_secret: str | None = field(default=None, repr=False)
    tls_client_cert: str | None = field(default=None, repr=False)
    tls_client_key: str | None = field(default=None, repr=False)
    # OAuth2 client credentials (delivery/oauth2.py): set when the token URL is; the
    # client secret opened (never logged)
    oauth2_token_url: str | None = None
    oauth2_client_id: str | None = None
    oauth2_client_secret: str | None = field(default=None, repr=False)
    oauth2_scope: str | None = None
    # Set (and every sealed field above emptied) when this row's sealed values do not open
    # with the worker's keys: the job is dead-lettered with this reason, never sent, and
    # the rest of its claim goes on. Not a claim column: always the last field.
    unopened: str | None = None

    @property
    def webhook_id(self) -> str:
        """The id receivers deduplicate on: the event id, stable across retries and replays."""
        return str(self.event_id)


@dataclass(frozen=True, slots=True)
class Completion:
    """The recorded result of one attempt (a row of the batched completion statement).

    ``state`` is the delivery's next state; ``delay`` (seconds, ``inf`` = parked until the
    endpoint is enabled) applies to ``pending``; ``refund`` undoes the attempt count of a
    claim that sent nothing (disabled endpoint).
    """

    delivery_id: int
    token: uuid.UUID
    state: str
    delay: float
    refund: int
    status: int | None
    error: str | None
    outcome: str
    attempt: int
    duration_ms: float
    error_class: str | None
    excerpt: str | None
    gone_endpoint: uuid.UUID | None = None
