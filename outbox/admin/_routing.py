"""Who receives an event: tenant scoping and event-type filters, validated at registration.

The rule itself runs in SQL, in one place (``outbox._db.queries.emit._FAN_OUT``), at emit time:
an event reaches every *enabled* endpoint that

- belongs to the event's tenant (a tenant-less event: the tenant-less endpoints), or
  opted in to every tenant (``all_tenants``: an internal consumer such as a data
  warehouse; it also receives tenant-less events), and
- has a type filter that matches: no filter (every type), the exact type, or a prefix
  pattern ``"invoice.*"`` (``invoice.paid``, ``invoice.line.added``; not ``invoice``).

This module checks what may be stored, before any SQL: filters are exact types
(:func:`outbox._emit.event.check_type`) or ``<type>.*``; ``"*"`` means every type and is stored
as no filter; tenant ids follow :func:`outbox._emit.event.check_tenant`; an endpoint has one
tenant or all of them, never both.
"""

from __future__ import annotations

from collections.abc import Sequence

from outbox._emit.event import check_tenant, check_type
from outbox.errors import InvalidEndpoint, InvalidEvent

WILDCARD = "*"
PREFIX_SUFFIX = ".*"


def validate_filters(event_types: Sequence[str] | None) -> list[str] | None:
    """The filters to store (sorted, deduplicated), or None for every type.

    Raises :class:`InvalidEndpoint` naming the bad filter.
    """
    if not event_types:
        return None
    if isinstance(event_types, str):
        raise InvalidEndpoint("event-type filter must be a list of types, not one string")
    for pattern in event_types:
        _check_filter(pattern)
    if WILDCARD in event_types:
        return None
    return sorted(set(event_types))


def _check_filter(pattern: object) -> None:
    if pattern == WILDCARD:
        return
    exact = pattern
    if isinstance(pattern, str) and pattern.endswith(PREFIX_SUFFIX):
        exact = pattern[: -len(PREFIX_SUFFIX)]
    try:
        check_type(exact)
    except InvalidEvent as exc:
        raise InvalidEndpoint(
            f"event-type filter {pattern!r}: {exc}; a filter is a type, 'prefix.*' or '*'"
        ) from None


def validate_scope(tenant: str | None, all_tenants: bool) -> str | None:
    """The endpoint's tenant (None: tenant-less or all tenants); :class:`InvalidEndpoint`
    if the id is malformed or both a tenant and ``all_tenants`` are given."""
    if all_tenants and tenant is not None:
        raise InvalidEndpoint(
            "an endpoint belongs to one tenant or opts in to all of them, not both")
    try:
        check_tenant(tenant)
    except InvalidEvent as exc:
        raise InvalidEndpoint(str(exc)) from None
    return tenant
