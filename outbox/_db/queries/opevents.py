"""SQL of operational events: the ``outbox.*`` events the sender emits about its own
deliveries and endpoints (docs/guides/operational-events.md), as CTE text that the statement
making the change includes, so an operational event commits with the change it reports or
not at all.

A statement that includes :data:`OP_EMIT` defines a CTE ``op_src(type, tenant, data)``: one
row per operational event, ``tenant`` the tenant it belongs to (the endpoint's: NULL for a
tenant-less or all-tenants endpoint), ``data`` a json object. :data:`OP_EMIT` writes each
as an event with the Standard Webhooks envelope ``{"type", "timestamp", "data"}`` (through
``op_insert()``, migrations/0013_operational_events.sql: an id made by ``uuid7()``, and
the only way the worker's role can write an event) and fans it out by emit's
routing rule (outbox._db.queries.emit), except that an endpoint whose filter is every type
does not take operational events: only endpoints that name them (``outbox.*``, or an exact
type) do. ``op_ins`` is a SELECT: it runs because ``op_fan`` (an INSERT, which always runs to
completion) reads it. :data:`OP_WAKE` runs only if the statement reads it.
"""

from __future__ import annotations

from outbox._db.queries.emit import WAKE_CHANNEL, WAKE_KEY, fan_out_grouped

# Every operational event type starts with this; emit refuses such types from applications
# (outbox._emit.event.prepare), and none is emitted about the delivery of one (no loops).
OP_PREFIX = "outbox."

# op_insert (migrations/0013_operational_events.sql) writes the events in op_src's order
# with their envelope, called only when op_src has rows (HAVING: a completion that reports
# nothing makes no call); op_fan routes them.
OP_EMIT = f"""
op_ins AS MATERIALIZED (
    SELECT i.* FROM (
        SELECT json_agg(json_build_object('type', s.type, 'tenant', s.tenant,
                                          'data', s.data)) AS events
          FROM op_src s HAVING count(*) > 0) a
     CROSS JOIN LATERAL {{schema}}.op_insert(a.events) i),
op_fan AS ({fan_out_grouped("op_ins", catch_all=False)} RETURNING 1)"""

# Wake an idle worker when operational deliveries were written (emit's wake-up test).
OP_WAKE = f"""
op_wake AS (
    SELECT pg_notify({WAKE_CHANNEL}, '') FROM (SELECT 1 FROM op_fan LIMIT 1) wrote
     WHERE NOT pg_try_advisory_xact_lock_shared({WAKE_KEY}))"""

# The newest operational events (console overview), of every type in %(types)s (the
# operational types): per type its newest %(limit)s by events_by_type (type, id), then
# the newest %(limit)s of those: cost bounded by types x limit, whatever the history.
# %(tenant)s NULL: every tenant's.
OP_RECENT = """
SELECT e.id, e.type, e.tenant, e.created_at, e.payload->'data' AS data
  FROM unnest(%(types)s::text[]) AS t(type)
 CROSS JOIN LATERAL (
      SELECT id, type, tenant, created_at, payload FROM {schema}.events
       WHERE type = t.type AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
       ORDER BY id DESC LIMIT %(limit)s) e
 ORDER BY e.id DESC LIMIT %(limit)s
"""

# A replay finished (outbox.admin.replay.replay, after its last batch, in a transaction of
# its own): one outbox.replay.finished of the replay's tenant scope (%(tenant)s; NULL: an
# operator's replay of every tenant, seen by tenant-less and all-tenants endpoints).
OP_REPLAY_FINISHED = """
WITH op_src AS (
    SELECT 'outbox.replay.finished'::text AS type, %(tenant)s::text AS tenant,
           json_build_object('tenant', %(tenant)s::text, 'replayed', %(replayed)s::int,
                             'skipped', %(skipped)s::int, 'batches', %(batches)s::int,
                             'enabled_endpoints', %(enabled)s::text[],
                             'actor', %(actor)s::text) AS data),""" + OP_EMIT + "," + OP_WAKE + """
SELECT count(*) FROM op_wake
"""
