"""The request for one delivery: body bytes, signed headers, timeouts, and the send.

:func:`send_job` is the one way a request leaves for an endpoint: the worker's delivery
loop and ``outbox endpoints ping`` both call it, so they sign, time out and classify alike.
The endpoint URL's scheme chooses the transport: http(s) is a POST (:mod:`.sender`), a
broker scheme a publish of the same signed bytes and headers (:mod:`.transports`).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import time

from outbox._destinations import is_broker
from outbox.delivery.jobs import Job
from outbox.delivery.oauth2 import Client, TokenFailure
from outbox.delivery.outcome import AttemptResult
from outbox.delivery.sender import PhaseTimeouts, Transport, send
from outbox.delivery.settings import WorkerSettings
from outbox.delivery.transports import to_message
from outbox.errors import ConfigurationError
from outbox.signing import webhook_headers


def build_headers(job: Job, body: bytes, *, user_agent: str, timestamp: int) -> dict[str, str]:
    """Standard Webhooks headers, signed by the current secret and, during a rotation's
    grace period, the previous one too; ``Idempotency-Key`` equals ``webhook-id``.
    The endpoint's custom headers come first, then its secret headers and its auth's
    ``Authorization`` (registration refuses names that would collide), and cannot
    override these. ``traceparent`` carries the emitting span's trace context when there
    was one (outbox._emit.tracing)."""
    secrets = (job.secret, job.previous_secret) if job.previous_secret else (job.secret,)
    msg_id = job.webhook_id
    # no custom headers: Accept-Encoding first, where send() looks for it (else it copies)
    headers = dict(job.headers) if job.headers else {"accept-encoding": "identity"}
    if job.secret_headers:
        headers.update(job.secret_headers)
    if job.auth_secret is not None:
        headers["authorization"] = authorization(job.auth_kind, job.auth_secret)
    headers.update(webhook_headers(secrets, msg_id, body, timestamp=timestamp))
    headers["idempotency-key"] = msg_id
    headers["content-type"] = "application/json"
    headers["user-agent"] = user_agent
    if job.traceparent:
        headers["traceparent"] = job.traceparent
    return headers


def authorization(kind: str | None, secret: str) -> str:
    """The ``Authorization`` value of an endpoint's static auth: ``Basic`` base64 of
    ``user:password`` (UTF-8, RFC 7617) or ``Bearer`` the token (RFC 6750)."""
    if kind == "basic":
        return "Basic " + base64.b64encode(secret.encode()).decode()
    if kind == "bearer":
        return "Bearer " + secret
    raise ValueError(f"no static Authorization for auth kind {kind!r}")


def _secrets(job: Job) -> list[str]:
    """The values that must not reach an attempt log (a receiver may echo a request)."""
    values = list(job.secret_headers.values()) if job.secret_headers else []
    if job.auth_secret is not None:
        values += [job.auth_secret, authorization(job.auth_kind, job.auth_secret).split()[1]]
        values += job.auth_secret.split(":", 1)[1:] if job.auth_kind == "basic" else []
    if job.oauth2_client_secret is not None:
        values.append(job.oauth2_client_secret)
    return [v for v in values if len(v) >= 4]


def redacted(result: AttemptResult, job: Job) -> AttemptResult:
    """``result`` with the endpoint's secret values in its response excerpt or error
    replaced by ``[redacted]`` (a receiver that echoes the request back, or an error that
    quotes it, must not put them in the attempt log, the console or the API)."""
    if not (job.secret_headers or job.auth_secret or job.oauth2_client_secret):
        return result
    excerpt, error = result.response_excerpt, result.error
    for value in _secrets(job):
        excerpt = excerpt.replace(value, "[redacted]") if excerpt else excerpt
        error = error.replace(value, "[redacted]") if error else error
    if (excerpt, error) == (result.response_excerpt, result.error):
        return result
    return dataclasses.replace(result, response_excerpt=excerpt, error=error)


_HTTP = ("http:", "https:")


@functools.lru_cache(maxsize=64)
def _timeouts(connect: float) -> PhaseTimeouts:
    return PhaseTimeouts(connect=connect)


async def send_job(transport: Transport, job: Job, settings: WorkerSettings,
                   *, timestamp: int) -> AttemptResult:
    """POST ``job.payload`` to ``job.url`` once through ``transport`` and classify the answer.

    Headers are :func:`build_headers` signed at ``timestamp`` (unix seconds); the total
    timeout is the endpoint's own (``job.timeout_seconds``) or the default, kept below the
    lease (:meth:`WorkerSettings.endpoint_timeout`); connecting gets at most
    ``connect_timeout_seconds`` of it (reads are bounded by the total alone); at most
    ``response_body_cap`` bytes of the answer are kept. Never raises for a network or HTTP
    failure (see :func:`~.sender.send`). A broker URL is published to through
    ``transport.brokers`` instead, under the same total timeout. An endpoint with a TLS
    client certificate connects with it (:meth:`~.sender.Transport.client_ssl`); an
    endpoint with OAuth2 goes through :func:`send_authorized`; the endpoint's secret values
    never reach the result (:func:`redacted`). A job whose sealed values did not open
    (``job.unopened``) raises :class:`~outbox.errors.ConfigurationError` before anything is
    built or sent.
    """
    if job.unopened is not None:  # never sent without its secrets: dead-lettered alone
        raise ConfigurationError(job.unopened)
    body = job.payload.encode()
    headers = build_headers(job, body, user_agent=settings.user_agent, timestamp=timestamp)
    total = settings.endpoint_timeout(job.timeout_seconds)
    if not job.url.startswith(_HTTP) and is_broker(job.url):
        return redacted(await transport.brokers.send(
            job.url, job.credentials, to_message(job, body, headers, timestamp),
            total_timeout=total), job)
    timeout = _timeouts(min(total, settings.connect_timeout_seconds))
    cert = (job.tls_client_cert, job.tls_client_key or "") if job.tls_client_cert else None
    if job.oauth2_token_url is not None:
        return redacted(await send_authorized(transport, job, body, headers, total,
                                              settings.connect_timeout_seconds,
                                              settings.response_body_cap, cert), job)
    return redacted(await send(transport, job.url, body, headers, timeout=timeout,
                               total_timeout=total, body_cap=settings.response_body_cap,
                               client_cert=cert), job)


async def send_authorized(transport: Transport, job: Job, body: bytes,
                          headers: dict[str, str], total: float, connect: float,
                          body_cap: int,
                          client_cert: tuple[str, str] | None = None) -> AttemptResult:
    """The POST of an OAuth2 endpoint: with ``Authorization: Bearer`` and the token of
    ``transport.tokens`` (:mod:`.oauth2`), sent once more with a new token if the receiver
    answers 401 (once: the second answer is the attempt's, classified as any other).

    ``total`` bounds the whole attempt: token requests and POSTs together. A token request
    that fails is the attempt's failure (RETRY ``oauth2_token``, or DEAD ``ssrf`` for a
    token URL the SSRF guard refuses), never an exception. ``headers`` (built for this
    call) get the ``authorization`` header."""
    assert job.oauth2_token_url is not None
    client = Client(job.oauth2_token_url, job.oauth2_client_id or "",
                    job.oauth2_client_secret or "", job.oauth2_scope)
    for name in [k for k in headers if k.lower() == "authorization"]:  # refused at
        del headers[name]  # registration, but a row may have been written by hand
    deadline = time.monotonic() + total
    result: AttemptResult | None = None
    for _ in range(2):
        left = deadline - time.monotonic()
        if result is not None and left <= 0:
            return result
        started = time.perf_counter()
        try:
            token = await transport.tokens.token(client, transport, max(left, 0.001))
        except TokenFailure as exc:
            return exc.result((time.perf_counter() - started) * 1000.0)
        left = max(deadline - time.monotonic(), 0.001)
        headers["authorization"] = "Bearer " + token
        # the connect bound of the whole attempt (cached): ``left`` bounds everything anyway
        result = await send(transport, job.url, body, headers,
                            timeout=_timeouts(min(total, connect)), total_timeout=left,
                            body_cap=body_cap, client_cert=client_cert)
        if result.status_code != 401:
            return result
        transport.tokens.invalidate(client, token)
    assert result is not None
    return result
