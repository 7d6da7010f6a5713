"""What a worker holds between claim and completion, and how a claim's rows become jobs."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import AsyncRowFactory, RowMaker, no_result

from outbox._security.secretbox import SecretBox
from outbox.delivery.queries import CLAIM_POSITION
from outbox.errors import ConfigurationError


class Job(NamedTuple):
    """One claimed delivery: the lease token fences its completion.

    Immutable (a named tuple: a claim row becomes one in a single step, where a frozen
    dataclass of these 33 fields took ~3 us a row setting each field); its repr shows none
    of the endpoint's credentials marked below."""

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
    # (not in the repr, _UNSHOWN: a job in a log line or a traceback shows none of them)
    secret_headers: dict[str, str] | None = None
    auth_kind: str | None = None
    auth_secret: str | None = None
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    # OAuth2 client credentials (delivery/oauth2.py): set when the token URL is; the
    # client secret opened (never logged)
    oauth2_token_url: str | None = None
    oauth2_client_id: str | None = None
    oauth2_client_secret: str | None = None  # (not in the repr either)
    oauth2_scope: str | None = None
    # Set (and every sealed field above emptied) when this row's sealed values do not open
    # with the worker's keys: the job is dead-lettered with this reason, never sent, and
    # the rest of its claim goes on. Not a claim column: always the last field.
    unopened: str | None = None

    @property
    def webhook_id(self) -> str:
        """The id receivers deduplicate on: the event id, stable across retries and replays."""
        return str(self.event_id)

    def __repr__(self) -> str:
        pairs = zip(self._fields, self, strict=True)
        shown = ", ".join(f"{name}={value!r}" for name, value in pairs if name not in _UNSHOWN)
        return f"Job({shown})"


_UNSHOWN = frozenset({"secret_headers", "auth_secret", "tls_client_cert", "tls_client_key",
                      "oauth2_client_secret"})


class Completion(NamedTuple):
    """The recorded result of one attempt (a row of the batched completion statement).

    ``state`` is the delivery's next state; ``delay`` (seconds, ``inf`` = parked until the
    endpoint is enabled) applies to ``pending``; ``refund`` undoes the attempt count of a
    claim that sent nothing (disabled endpoint). Immutable (a named tuple, made once per
    attempt: cheaper to build than a frozen dataclass).
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


# the claim's columns: every field of Job but the last (``unopened``, set by job_row)
_JOB_FIELDS = Job._fields[:-1]
assert Job._fields[-1] == "unopened"
_SECRET = _JOB_FIELDS.index("secret")  # previous_secret follows it
assert _JOB_FIELDS[_SECRET + 1] == "previous_secret"
_CREDENTIALS = _JOB_FIELDS.index("credentials")
_SECRET_HEADERS = _JOB_FIELDS.index("secret_headers")
_HEADERS = _JOB_FIELDS.index("headers")  # NULL from the claim when empty (queries.CLAIM)
# sealed text columns opened when set (the auth secret, the TLS client cert and key)
_SEALED = tuple(_JOB_FIELDS.index(f) for f in ("auth_secret", "tls_client_cert",
                                                "tls_client_key"))
_OAUTH2_SECRET = _JOB_FIELDS.index("oauth2_client_secret")
_POSITION = CLAIM_POSITION.encode()


def job_row(box: SecretBox) -> AsyncRowFactory[Job]:
    """Row factory: claim rows as :class:`Job`, secrets opened with ``box``.

    The result's column names must be exactly Job's fields (any order), and may include the
    claim's rotation position (``CLAIM_POSITION``: not a field, left to
    :func:`claimed_position`). Each result's raw
    names key a cache, so the names are resolved once per distinct column list (building
    ``cursor.description`` costs ~30 us a claim); each row is then built positionally
    (``class_row`` builds by keyword: ~3x slower on the hot path).

    A row whose sealed values no key opens (sealed with a key the worker lacks, or
    tampered with) is this row's problem only: its job comes back with every sealed field
    emptied and ``unopened`` set (the worker dead-letters it unsent:
    :func:`~.request.send_job`), never an error that would fail the whole claim for every
    tenant. The common path pays one ``try`` per row (no cost in CPython 3.11).
    """
    open_ = box.open
    new = tuple.__new__  # Job's values, all of them: Job(*v) without its argument parsing
    pickers: dict[tuple[bytes | None, ...], Callable[[Sequence[Any]], Any]] = {}

    def factory(cursor: psycopg.AsyncCursor[Any]) -> RowMaker[Job]:
        res = cursor.pgresult
        if res is None or not res.nfields:  # no result, or a command's (no columns)
            return no_result
        raw = tuple(map(res.fname, range(res.nfields)))
        pick = pickers.get(raw)
        if pick is None:
            pick = pickers[raw] = _job_picker([c.name for c in cursor.description or ()])

        def make(values: Sequence[Any]) -> Job:
            v = list(pick(values))
            if v[_HEADERS] is None:
                v[_HEADERS] = {}
            try:  # inline, not a call: this runs for every claimed row
                v[_SECRET] = open_(v[_SECRET])
                previous = v[_SECRET + 1]
                v[_SECRET + 1] = open_(previous) if previous else None
                if v[_CREDENTIALS] is not None:
                    v[_CREDENTIALS] = open_(v[_CREDENTIALS])
                if v[_SECRET_HEADERS]:
                    v[_SECRET_HEADERS] = {k: open_(s) for k, s in v[_SECRET_HEADERS].items()}
                for i in _SEALED:
                    if v[i] is not None:
                        v[i] = open_(v[i])
                if v[_OAUTH2_SECRET] is not None:
                    v[_OAUTH2_SECRET] = open_(v[_OAUTH2_SECRET])
            except ConfigurationError as exc:  # this row only (see job_row)
                row = _emptied(list(pick(values)))
                row[_HEADERS] = v[_HEADERS]
                row.append(str(exc))  # unopened
                return new(Job, row)
            v.append(None)  # unopened
            return new(Job, v)

        return make

    return factory


def _emptied(v: list[Any]) -> list[Any]:
    """A claim row ``v`` with none of its sealed values (opened or not) left in it."""
    v[_SECRET], v[_SECRET + 1], v[_CREDENTIALS], v[_SECRET_HEADERS] = "", None, None, None
    for i in (*_SEALED, _OAUTH2_SECRET):
        v[i] = None
    return v


def _job_picker(names: list[str]) -> Callable[[Sequence[Any]], Any]:
    """A row's values in Job's field order, or TypeError if ``names`` are not its fields
    (the claim's position column aside)."""
    if sorted(n for n in names if n != CLAIM_POSITION) != sorted(_JOB_FIELDS):
        raise TypeError(f"claim columns {names} are not Job's fields {list(_JOB_FIELDS)}")
    return itemgetter(*(names.index(f) for f in _JOB_FIELDS))


def claimed_position(res: Any) -> tuple[str | None, bool]:
    """From a claim's raw result (``cursor.pgresult``): the rotation position it carries
    (``CLAIM_POSITION``, the same in every row; None before any endpoint was visited) and
    whether it claimed nothing (then its one row holds the position alone: no job to load)."""
    if res is None or not res.ntuples:
        return None, True
    names = [res.fname(i) for i in range(res.nfields)]
    value = res.get_value(0, names.index(_POSITION))
    empty = res.ntuples == 1 and res.get_value(0, names.index(b"delivery_id")) is None
    return (bytes(value).decode() if value is not None else None), empty


class Unloaded(NamedTuple):
    """A claimed row Python cannot hold (a value out of its types' range, e.g. an event time
    of ``infinity`` written by hand): its lease, to dead-letter it, and the error."""

    delivery_id: int
    token: uuid.UUID
    attempt: int
    error: str


async def load_each(cur: psycopg.AsyncCursor[Job]) -> tuple[list[Job], list[Unloaded]]:
    """The claim's rows one at a time, once loading them all at once failed: the jobs, and
    the rows a value of which cannot be loaded (their lease read from the raw result)."""
    res = cur.pgresult
    assert res is not None
    names = [res.fname(i) for i in range(res.nfields)]
    at = [names.index(name) for name in (b"delivery_id", b"token", b"attempt")]
    jobs: list[Job] = []
    unloaded: list[Unloaded] = []
    await cur.scroll(0, mode="absolute")
    for pos in range(res.ntuples):
        try:
            job = await cur.fetchone()
        except psycopg.DataError as exc:
            raw = [_raw(res, pos, i) for i in at]
            unloaded.append(Unloaded(int(raw[0]), uuid.UUID(raw[1]), int(raw[2]),
                                     f"{type(exc).__name__}: {exc}"))
            await cur.scroll(1)
            continue
        if job is not None:
            jobs.append(job)
    return jobs, unloaded


def _raw(res: Any, row: int, col: int) -> str:
    """One value of a result as text (an integer or a UUID, in text or binary format)."""
    value = bytes(res.get_value(row, col))
    if res.fformat(col) == 0:
        return value.decode()
    if len(value) == 16:
        return str(uuid.UUID(bytes=value))
    return str(int.from_bytes(value, "big", signed=True))
