"""``outbox endpoints ping``: one signed ``outbox.ping`` event, sent now, recorded nowhere.

Guarantees of :func:`ping`:

- The request is the worker's own (:func:`~outbox.delivery.request.send_job`): same
  signing (both secrets during a rotation), headers, timeouts, body cap and outcome
  classification; by default over the worker's SSRF-guarded transport
  (:func:`~outbox.delivery.runner.make_worker_transport`), which refuses hosts and IP
  literals outside ``OUTBOX_ALLOW_NETWORKS`` before connecting.
- It is sent even if the endpoint is disabled, exactly once (no retry), and nothing is
  written to the database.
- It never raises for a network, TLS, SSRF or HTTP failure: those are in the result.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from outbox._emit.event import new_id
from outbox.admin.endpoints import DeliveryCredentials, Endpoint
from outbox.delivery.jobs import Job
from outbox.delivery.outcome import Verdict
from outbox.delivery.request import send_job
from outbox.delivery.runner import make_worker_transport
from outbox.delivery.sender import Transport
from outbox.delivery.settings import WorkerSettings
from outbox.errors import InvalidEndpoint

PING_TYPE = "outbox.ping"


@dataclass(frozen=True, slots=True)
class PingResult:
    """What the endpoint answered. ``status`` is None when no response arrived; ``verdict``
    is what the worker would have made of it (only DELIVERED is a success); ``error`` is
    the worker's one-line error; ``response`` the kept excerpt of the body."""

    webhook_id: str
    url: str
    status: int | None
    duration_ms: float
    verdict: Verdict
    error: str | None
    response: str | None

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.DELIVERED


def ping_job(endpoint: Endpoint, secrets: Sequence[str], now: dt.datetime,
             credentials: str | None = None, auth: DeliveryCredentials | None = None,
             oauth2_secret: str | None = None) -> Job:
    """The one-attempt job for a ping of ``endpoint`` at ``now``, signed by ``secrets``
    (current first, then the previous one while its grace runs); ``credentials``: a broker
    URL's (``outbox.admin.endpoints.url_credentials``); ``auth``: the endpoint's secret headers,
    auth and TLS client certificate (``outbox.admin.endpoints.delivery_credentials``);
    ``oauth2_secret``: the OAuth2 client secret of an endpoint with OAuth2
    (``outbox.admin.endpoint_oauth2.client_secret``)."""
    auth = auth if auth is not None else DeliveryCredentials()
    if not secrets:
        raise InvalidEndpoint(f"endpoint {endpoint.id} has no signing secret")
    body = json.dumps({"type": PING_TYPE, "timestamp": now.isoformat(timespec="seconds"),
                       "data": {"endpoint_id": str(endpoint.id)}}, separators=(",", ":"))
    return Job(
        delivery_id=0, attempt=1, token=uuid.uuid4(), event_id=new_id(), event_type=PING_TYPE,
        payload=body, emitted_at=now, endpoint_id=endpoint.id, url=endpoint.url,
        enabled=endpoint.enabled, secret=secrets[0],
        previous_secret=secrets[1] if len(secrets) > 1 else None, headers=endpoint.headers,
        max_attempts=1, retry_base_seconds=None, retry_cap_seconds=None,
        timeout_seconds=endpoint.timeout_seconds, credentials=credentials,
        secret_headers=auth.secret_headers, auth_kind=auth.auth_kind,
        auth_secret=auth.auth_secret, tls_client_cert=auth.tls_client_cert,
        tls_client_key=auth.tls_client_key,
        oauth2_token_url=endpoint.oauth2_token_url if oauth2_secret else None,
        oauth2_client_id=endpoint.oauth2_client_id, oauth2_client_secret=oauth2_secret,
        oauth2_scope=endpoint.oauth2_scope,
    )


async def ping(settings: WorkerSettings, endpoint: Endpoint, secrets: Sequence[str], *,
               transport: Transport | None = None, credentials: str | None = None,
               auth: DeliveryCredentials | None = None,
               oauth2_secret: str | None = None) -> PingResult:
    """Send one ping to ``endpoint`` (see module guarantees); ``transport`` defaults to a
    fresh worker transport, closed afterwards (a given one is left open). A broker
    endpoint (``credentials``: its URL's) gets one published ``outbox.ping`` message.
    ``auth``, ``oauth2_secret``: as for :func:`ping_job` (the ping carries them like a
    delivery)."""
    now = dt.datetime.now(dt.UTC)
    job = ping_job(endpoint, secrets, now, credentials, auth, oauth2_secret)
    if transport is None:
        async with make_worker_transport(settings) as own:
            result = await send_job(own, job, settings, timestamp=int(now.timestamp()))
    else:
        result = await send_job(transport, job, settings, timestamp=int(now.timestamp()))
    return PingResult(webhook_id=job.webhook_id, url=endpoint.url, status=result.status_code,
                      duration_ms=result.duration_ms, verdict=result.verdict,
                      error=result.error, response=result.response_excerpt)
