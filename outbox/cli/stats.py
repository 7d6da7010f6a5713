"""``outbox stats``: the queue per endpoint and the top tenants, once or continuously."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import uuid

import click

from outbox.admin import flow
from outbox.admin import stats as st
from outbox.admin._timeparse import format_duration
from outbox.cli.output import cut, print_table, to_jsonable
from outbox.cli.params import FiniteRange, tenant_option
from outbox.cli.root import Context, cli, pass_ctx

TOP_TENANTS = 10


Flows = dict[uuid.UUID, flow.FlowState]


def _snapshot(ctx: Context, tenant: str | None) -> tuple[st.Snapshot, Flows]:
    """The queue, and the flow state of its endpoints (allowed rate, throttled)."""
    with ctx.connect() as conn:
        snap = st.snapshot(conn, schema=ctx.schema, tenant=tenant, top=TOP_TENANTS)
        flows = flow.states(conn, [r.endpoint_id for r in snap.endpoints], schema=ctx.schema)
    return snap, flows


def _rate(state: flow.FlowState | None) -> str:
    if state is None or state.allowed_rate is None:
        return "-" if state is None or not state.throttled else "paused"
    return f"{state.allowed_rate:.4g}" + (" throttled" if state.throttled else "")


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _queued(r: st.EndpointStats) -> str:
    """Ordered endpoints' queue behind key heads, and how much of it a dead head blocks."""
    if not r.blocked_keys:
        return str(r.waiting)
    return f"{r.waiting} ({r.blocked} blocked, {r.blocked_keys} keys)"


def _print(snap: st.Snapshot, flows: Flows) -> None:
    rows, due = snap.endpoints, snap.due
    queued = any(r.waiting or r.blocked_keys for r in rows)  # ordered endpoints in use
    table = [
        [str(r.endpoint_id), r.url + ("" if r.enabled else " [disabled]"), str(r.pending),
         str(r.due), str(r.in_flight), *([_queued(r)] if queued else []), str(r.delivered_1h),
         str(r.dead_1h), _age(r.oldest_due_seconds), _rate(flows.get(r.endpoint_id)),
         cut(r.last_error, 40)]
        for r in rows
    ]
    print_table(["endpoint", "url", "pending", "due", "in flight",
                 *(["waiting"] if queued else []), "delivered 1h", "dead 1h", "oldest due",
                 "allowed/s", "last error"], table)
    click.echo(f"due now: {due.due}, oldest due: {_age(due.oldest_due_seconds)}")
    if snap.tenants:
        click.echo(f"\ntop tenants by due backlog (at most {TOP_TENANTS}):")
        print_table(["tenant", "due", "oldest due"],
                    [[t.tenant if t.tenant is not None else "-", str(t.due),
                      _age(t.oldest_due_seconds)] for t in snap.tenants])


def _as_json(snap: st.Snapshot, flows: Flows) -> str:
    """``tenants``: the top tenants by due backlog (``tenant`` null: tenant-less events);
    each endpoint's ``flow``: its allowed rate (null: unlimited) and throttled state."""
    endpoints = [{**to_jsonable(r), "flow": to_jsonable(flows.get(r.endpoint_id))}
                 for r in snap.endpoints]
    return json.dumps({"at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                       "due": to_jsonable(snap.due), "endpoints": endpoints,
                       "tenants": to_jsonable(snap.tenants)})


@cli.command()
@click.option("--json", "as_json", is_flag=True,
              help="JSON for scripts (with --watch: one JSON object per line).")
@click.option("--watch", type=FiniteRange(min=0.2, max=86_400), is_flag=False,
              flag_value=2.0, default=None, metavar="[SECONDS]",
              help="Refresh every SECONDS (2 if omitted; 0.2 to 86,400) until Ctrl-C.")
@tenant_option("Only this tenant's endpoints (and the all-tenants ones), counting only "
               "deliveries of its events.")
@click.option("--iterations", type=click.IntRange(min=1), default=None, hidden=True)
@pass_ctx
def stats(ctx: Context, as_json: bool, watch: float | None, tenant: str | None,
          iterations: int | None) -> None:
    """Per endpoint: pending, due now, in flight, waiting (shown while any ordered endpoint
    has deliveries queued behind their key's head; "blocked": behind a dead head, until
    `outbox replay` or `outbox dead skip`), delivered and dead in the last hour,
    how long the oldest due delivery has waited, the rate every worker together may
    send at (- : unlimited; "throttled": lowered after 429/503/timeouts), and the last
    error; then the top 10 tenants by due backlog (tenant-less events show as -), with
    the oldest wait of each, counted over the oldest 10,000 due deliveries (with
    --tenant: all of its own).

    Cheap enough to run every few seconds: it reads the partial indexes of the backlog
    and the last hour of finished deliveries, never the whole history.

    \b
    Examples:
      outbox stats
      outbox stats --watch 5
      outbox stats --tenant acme
      outbox stats --json | jq '.endpoints[] | select(.dead_1h > 0)'
    """
    shown = 0
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            snap, flows = _snapshot(ctx, tenant)
            if as_json:
                click.echo(_as_json(snap, flows) if watch else
                           json.dumps(json.loads(_as_json(snap, flows)), indent=2))
            else:
                if watch and shown:
                    click.clear()
                if watch:
                    click.echo(f"every {watch:g}s, Ctrl-C to stop   "
                               f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%SZ}")
                _print(snap, flows)
            shown += 1
            if watch is None or (iterations is not None and shown >= iterations):
                return
            time.sleep(watch)
