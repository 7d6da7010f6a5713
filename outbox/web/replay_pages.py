"""The replay confirmation both the console and the portal show: a dry run
(:func:`outbox.admin.replay.plan_replay`) of the selection, then a form that runs it.

A selection arrives as query or form fields, the CLI's selectors: ``ids`` (comma-separated
delivery ids), ``endpoint`` (an endpoint id), ``event_type`` and ``tenant``. Parsing
raises the library's errors (unknown-looking ids are "not found", a bad tenant is
:class:`~outbox.errors.InvalidEvent`) before any SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from fastapi import Request
from fastapi.responses import Response

from outbox.admin import deadletter
from outbox.admin import endpoints as ep
from outbox.admin import replay as rp
from outbox.web.pages import BAD_INPUT, NOT_FOUND, render

FIELDS = ("ids", "endpoint", "event_type", "tenant")
MAX_IDS = 1000


def selection_query(params: Mapping[str, str]) -> dict[str, str]:
    """The non-empty selector fields of ``params`` (for links and hidden form fields)."""
    return {name: params[name].strip() for name in FIELDS
            if name in params and params[name].strip()}


def selection_from(params: Mapping[str, str], *, tenant: str | None = None
                   ) -> deadletter.Selection:
    """The :class:`~outbox.admin.deadletter.Selection` the fields describe; ``tenant`` (the
    portal's) overrides any given one."""
    given = selection_query(params)
    ids = tuple(deadletter.parse_delivery_id(part) for part in given.get("ids", "").split(",")
                if part.strip())
    if len(ids) > MAX_IDS:
        raise ValueError(f"at most {MAX_IDS} delivery ids at once, got {len(ids)}")
    endpoint = ep.parse_id(given["endpoint"]) if "endpoint" in given else None
    return deadletter.Selection(
        ids=ids, endpoint_id=endpoint, event_type=given.get("event_type"),
        tenant=tenant if tenant is not None else given.get("tenant"))


def confirm_page(request: Request, conn: psycopg.Connection[Any], context: dict[str, Any], *,
                 schema: str, tenant: str | None, action: str, back: str,
                 selection: deadletter.Selection | None = None) -> Response:
    """The dry run of the request's selection and a form to run it (nothing is changed
    here). ``tenant``: the portal's scope (its selection may name no other tenant)."""
    page = {**context, "action": action, "back": back}
    try:
        chosen = selection or selection_from(request.query_params, tenant=tenant)
        plan = rp.plan_replay(conn, schema=schema, selection=chosen)
    except BAD_INPUT + NOT_FOUND as exc:
        return render(request, "replay_confirm.html", {**page, "error": str(exc)},
                      status_code=404 if isinstance(exc, NOT_FOUND) else 400)
    hidden = [(k, v) for k, v in selection_query(request.query_params).items()
              if tenant is None or k != "tenant"]
    return render(request, "replay_confirm.html", {
        **page, "plan": plan, "ids": list(chosen.ids), "hidden": hidden})
