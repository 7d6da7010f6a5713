"""SQL of emit (outbox.emit): the routing rule, the event and fan-out statements, and the
wake-up folded into them (outbox.delivery.wakeup has the design)."""

from __future__ import annotations

# --- emit -------------------------------------------------------------------------------
# The routing rule, written once and used by every emit path: the endpoints in scope of a
# tenant ``t`` are its own enabled endpoints (a tenant-less event: the tenant-less ones)
# plus the enabled all-tenants endpoints. Each branch is an index lookup
# (endpoints_by_tenant, endpoints_all_tenants: migration 0004), so the cost follows the
# tenant's own endpoints, never the number of endpoints or tenants
# (tests/integration/test_routing_plan.py fails on a plan that scans endpoints).


# ``q``: how tables are qualified: "{schema}." here, "" in the SQL function outbox.emit
# (its search_path is pinned to its schema).
def _scope(t: str, q: str = "{schema}.") -> str:
    cols = "p.id, p.event_types, p.ordered, p.filter_path"
    return f"""(
            SELECT {cols} FROM {q}endpoints p
             WHERE p.tenant = {t} AND p.enabled
            UNION ALL
            SELECT {cols} FROM {q}endpoints p
             WHERE {t} IS NULL AND p.tenant IS NULL AND p.enabled AND NOT p.all_tenants
            UNION ALL
            SELECT {cols} FROM {q}endpoints p
             WHERE p.all_tenants AND p.enabled)"""


# A filter is an exact type or a prefix pattern 'invoice.*' (stored as written; '*' alone
# is stored as NULL, every type): outbox.admin._routing validates them at registration.
# ``pct``: the LIKE wildcard as written in the text: '%%' where the driver binds parameters,
# '%' in the SQL function.
def _takes(types: str, t: str, pct: str = "%%") -> str:
    return f"""({types} IS NULL OR {t} = ANY ({types})
        OR EXISTS (SELECT FROM unnest({types}) f
                    WHERE f LIKE '{pct}.*' AND starts_with({t}, left(f, -1))))"""


# Payload filters (outbox.admin.filters, docs/guides/filters.md): an endpoint's filter is
# compiled at registration into a jsonpath predicate (endpoints.filter_path; NULL: no
# filter) and evaluated here, on the event's payload as jsonb (``doc``), so a filtered-out
# endpoint gets no delivery row at all. Evaluated only for an endpoint already in scope
# whose type filter takes the event (the CASE fixes that order: the planner may reorder
# ANDed quals), so endpoints of other tenants or types cost nothing, and the payload is
# parsed only then. The payload comes from the statement's own input, never RETURNING
# from events: the app role may not read events.payload (migrations/roles.sql).
# jsonb cannot hold a NUL character: a payload whose json text has the escape \u0000 (an
# even number of backslashes before it) is NULL here and matches no filter, rather than
# failing the emit.
def _doc(payload: str) -> str:
    """The json (or text) ``payload`` as jsonb, NULL if it holds a NUL."""
    text = f"{payload}::text"
    return (f"CASE WHEN strpos({text}, '\\u0000') = 0"
            f" OR {text} !~ '(^|[^\\\\])(\\\\\\\\)*\\\\u0000' THEN {payload}::jsonb END")


def _passes(doc: str) -> str:
    return f"CASE WHEN ep.filter_path IS NULL THEN true ELSE {doc} @@ ep.filter_path END"


# The same evaluation for `outbox endpoints test-filter` (outbox.admin.filters).
payload_doc = _doc
filter_passes = _passes


def _routed(types: str, t: str, doc: str, pct: str = "%%") -> str:
    return f"CASE WHEN {_takes(types, t, pct)} THEN {_passes(doc)} ELSE false END"


# Ordered endpoints (migrations/0005_ordered.sql has the design): a delivery of
# an event with a key to an ordered endpoint carries the key and starts 'fresh' (not
# claimable: a worker makes it its key's head or puts it behind the head); every other
# delivery starts 'pending' with no key, exactly as before. Emit takes no lock for it and
# reads nothing but the endpoint's flag. Order within a key is the deliveries' id order
# (the identity is taken as each row is inserted): a batch's rows are inserted in event
# order, so a key's events of one statement keep their order.
_KEY = "CASE WHEN ep.ordered THEN ins.key END"
_STATE = "CASE WHEN ep.ordered AND ins.key IS NOT NULL THEN 'fresh' ELSE 'pending' END"

# Fan-out of the event rows ``ins(id, type, tenant, key)``, in the same statement as they
# are inserted: one delivery per endpoint in scope whose type filter takes the type and
# whose payload filter takes ``doc`` (the event's payload as jsonb, from ``source``).
def _fan_out(doc: str, q: str = "{schema}.", pct: str = "%%", source: str = "ins") -> str:
    return f"""
    INSERT INTO {q}deliveries (event_id, endpoint_id, key, state)
    SELECT ins.id, ep.id, {_KEY}, {_STATE}
      FROM {source} CROSS JOIN LATERAL {_scope("ins.tenant", q)} ep
     WHERE {_routed("ep.event_types", "ins.type", doc, pct)}
"""


# One event: its values in ``v`` (positional parameters, in the order of the columns),
# which the event's INSERT and the fan-out (the payload) both read.
_ONE_VALUES = """
WITH v AS (
    SELECT %s::uuid AS id, %s::text AS type, %s::json AS payload, %s::text AS key,
           %s::text AS traceparent, %s::text AS tenant),
ins AS (
    INSERT INTO {schema}.events (id, type, payload, key, idempotency_key, traceparent, tenant)
    SELECT id, type, payload, key, NULL, traceparent, tenant FROM v
    RETURNING id, type, tenant, key)"""
_FAN_OUT = _fan_out(_doc("v.payload"), source="ins CROSS JOIN v")
# With named parameters (the idempotent emit): the payload is the parameter itself.
_FAN_OUT_NAMED = _fan_out(_doc("%(payload)s::json"))

# The same for a batch: the rule runs once per distinct (tenant, type) of the batch, not per
# event (1,000 events over 100 tenants: 100 lookups), then joins back to the events.
# '' stands for "no tenant" in the join key only (a tenant id is never empty).
# Rows go in event order (ids are UUIDv7, made in input order): see _KEY above.
# ``source`` names the event rows (a CTE); ``catch_all=False`` leaves out endpoints whose
# filter is every type (NULL): operational events (outbox._db.queries.opevents) reach only
# endpoints that name them (``outbox.*`` or an exact type), and payload filters do not
# apply to them (``source`` has no payload column then): the filter of an endpoint that
# names operational events is for its application events.
# Application events: the payload filter runs per event, after the join (each event's
# payload), only for the endpoints the (tenant, type) lookup kept.
# ``payloads``: (a join to ``source`` giving each event's payload, the payload as jsonb),
# required with ``catch_all`` (application events).
def fan_out_grouped(source: str, *, catch_all: bool = True,
                    payloads: tuple[str, str] | None = None) -> str:
    takes = _takes("ep.event_types", "k.type")
    join, passes = "", "true"
    if catch_all:
        assert payloads is not None, "application events are routed by their payload too"
        join, passes = payloads[0], _passes(payloads[1])
    else:
        takes = f"(ep.event_types IS NOT NULL AND {takes})"
    return f"""
    INSERT INTO {{schema}}.deliveries (event_id, endpoint_id, key, state)
    SELECT ins.id, ep.id, {_KEY}, {_STATE}
      FROM {source} ins {join} JOIN (
            SELECT k.tenant, k.type, ep.id, ep.ordered, ep.filter_path
              FROM (SELECT DISTINCT tenant, type FROM {source}) k
             CROSS JOIN LATERAL {_scope("k.tenant")} ep
             WHERE {takes}) ep
        ON COALESCE(ep.tenant, '') = COALESCE(ins.tenant, '') AND ep.type = ins.type
     WHERE {passes}
     ORDER BY ins.id
"""


# The batch's payloads: from ``input`` (emit_many's parameters), joined by event id.
_FAN_OUT_GROUPED = fan_out_grouped(
    "ins", payloads=("JOIN input pin ON pin.id = ins.id", _doc("pin.payload")))

EMIT_ONE = _ONE_VALUES + "\n" + _FAN_OUT

# The wake-up (OUTBOX_WAKEUP=notify) folds into these two statements as a CTE ``wake``
# that must run although nothing reads its rows: a CTE nothing reads never runs, and the
# planner removes a join whose columns nothing reads, so the final SELECT carries it as a
# scalar subquery in WHERE (an InitPlan: runs once). _wake_ctes() is the only place this
# text is made: ``fan`` returns a row per delivery written, and ``wake`` tests them.
def _wake_ctes(fan_out: str, wake: bool) -> str:
    if not wake:
        return "fan AS (" + fan_out + ")"
    return "fan AS (" + fan_out + " RETURNING 1),\nwake AS (" + _WAKE_IF_IDLE + ")"


def _wake_guard(wake: bool) -> str:
    return " WHERE (SELECT count(*) FROM wake) >= 0" if wake else ""


# Idempotency keys (migrations/0025_partitioned_events.sql): events is partitioned by id,
# so the keys' unique index is event_keys' primary key. The key goes in first (ON CONFLICT
# DO NOTHING: a key another transaction holds uncommitted makes this one wait for it, as a
# unique index of events did); only the events whose key it won are inserted; a taken key
# returns the first event's id from event_keys.
# With an idempotency key: a conflict inserts nothing and returns the first event's id.
def _emit_one_idempotent(wake: bool) -> str:
    return """
WITH k AS (
    INSERT INTO {schema}.event_keys (idempotency_key, event_id)
    VALUES (%(ikey)s, %(id)s)
    ON CONFLICT DO NOTHING
    RETURNING event_id),
ins AS (
    INSERT INTO {schema}.events (id, type, payload, key, idempotency_key, traceparent, tenant)
    SELECT %(id)s::uuid, %(type)s::text, %(payload)s::json, %(key)s::text, %(ikey)s::text,
           %(traceparent)s::text, %(tenant)s::text
      FROM k
    RETURNING id, type, tenant, key),
""" + _wake_ctes(_FAN_OUT_NAMED, wake) + """
SELECT id FROM ins""" + _wake_guard(wake) + """
UNION ALL
SELECT event_id FROM {schema}.event_keys
 WHERE idempotency_key = %(ikey)s AND NOT EXISTS (SELECT 1 FROM ins)
"""


# Bulk: arrays in, one round trip; returns the event id of every input row, in input order.
def _emit_many(wake: bool) -> str:
    return """
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(types)s::text[], %(payloads)s::text[],
                         %(keys)s::text[], %(ikeys)s::text[], %(traceparents)s::text[],
                         %(tenants)s::text[])
           WITH ORDINALITY AS t(id, type, payload, key, ikey, traceparent, tenant, ord)),
k AS (
    INSERT INTO {schema}.event_keys (idempotency_key, event_id)
    SELECT ikey, id FROM input WHERE ikey IS NOT NULL ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING event_id),
ins AS (
    INSERT INTO {schema}.events (id, type, payload, key, idempotency_key, traceparent, tenant)
    SELECT id, type, payload::json, key, ikey, traceparent, tenant FROM input
     WHERE ikey IS NULL OR id IN (SELECT event_id FROM k)
     ORDER BY ord
    RETURNING id, type, tenant, key),
""" + _wake_ctes(_FAN_OUT_GROUPED, wake) + """
SELECT COALESCE(ins.id, old.event_id) AS id
  FROM input
  LEFT JOIN ins ON ins.id = input.id
  LEFT JOIN {schema}.event_keys old
    ON ins.id IS NULL AND old.idempotency_key = input.ikey""" \
        + _wake_guard(wake) + """
 ORDER BY input.ord
"""


# Bulk without idempotency keys: the events and their deliveries by binary COPY (about
# 1.5x the rate of INSERT ... SELECT for the same rows). Which endpoints take which event
# still comes from the rule above, in SQL: ROUTES answers it once per distinct
# (tenant, type) of the batch, and emit.py writes one delivery per (event, route).
COPY_EVENTS = """
COPY {schema}.events (id, type, payload, key, traceparent, tenant) FROM STDIN (FORMAT BINARY)
"""
# ``filtered``: the endpoint has a payload filter; such a batch is not copied but written
# by EMIT_MANY (outbox._emit.drivers.psycopg), whose fan-out evaluates it per event.
ROUTES = f"""
SELECT k.tenant, k.type, ep.id AS endpoint_id, ep.ordered,
       ep.filter_path IS NOT NULL AS filtered
  FROM unnest(%(tenants)s::text[], %(types)s::text[]) AS k(tenant, type)
 CROSS JOIN LATERAL {_scope("k.tenant")} ep
 WHERE {_takes("ep.event_types", "k.type")}
"""
# Columns as _FAN_OUT writes them: (event id, endpoint id, key, state), the key and state
# of an ordered endpoint's delivery as _KEY and _STATE say (emit.py's _deliveries).
COPY_DELIVERIES = """
COPY {schema}.deliveries (event_id, endpoint_id, key, state) FROM STDIN (FORMAT BINARY)
"""

# Whether this session holds outbox's prepared statement %s (outbox._emit.drivers.dbapi: psycopg2
# and Django prepare the single-event emits with SQL PREPARE; checked in the transaction
# that EXECUTEs it, so a pooler handing out another server connection per transaction, or
# a DISCARD ALL, only costs a new PREPARE).
PREPARED_STATEMENT = "SELECT 1 FROM pg_prepared_statements WHERE name = %s"

# Second look for an idempotency key another transaction committed during our statement.
EVENT_ID_BY_IDEMPOTENCY_KEY = """
SELECT idempotency_key, event_id AS id FROM {schema}.event_keys
 WHERE idempotency_key = ANY (%s::text[])
"""

# --- wake-up (design, alternatives and figures: outbox/delivery/wakeup.py) ----
# An idle worker holds the session advisory lock WAKE_KEY (exclusive) or waits for it. An
# emitting transaction that wrote deliveries tries WAKE_KEY shared for the rest of its
# transaction: if that fails, a worker is idle, and it sends ONE payload-less pg_notify
# (PostgreSQL folds identical notifications of one transaction into one). If it succeeds,
# every worker is busy claiming, nobody needs waking, and the transaction commits without
# NOTIFY's database-wide commit lock; the shared lock it holds until commit makes a worker
# that wants to go idle wait for that commit, then claim once more, so no event is missed.
# Scope: advisory locks and channels are per database; the key and channel name hash the
# schema ('{schema}' renders as the quoted name: a string constant here).
# ``name``: the SQL text of the quoted schema name as a string ('{schema}' here; the SQL
# function computes the same string from its pinned search_path).
def _wake_key(name: str) -> str:
    return f"hashtext('outbox.wakeup'), hashtext({name})"


def _wake_channel(name: str) -> str:
    return f"'outbox_wakeup_' || left(md5({name}), 16)"


def _wake_if_idle(name: str) -> str:
    return f"""
SELECT pg_notify({_wake_channel(name)}, '') FROM (SELECT 1 FROM fan LIMIT 1) wrote
 WHERE NOT pg_try_advisory_xact_lock_shared({_wake_key(name)})"""


WAKE_KEY = _wake_key("'{schema}'")
WAKE_CHANNEL = _wake_channel("'{schema}'")
_WAKE_IF_IDLE = _wake_if_idle("'{schema}'")
# emit_many's COPY path: the same test as its own statement, after the deliveries' COPY.
WAKE = (f"SELECT pg_notify({WAKE_CHANNEL}, '')"
        f" WHERE NOT pg_try_advisory_xact_lock_shared({WAKE_KEY})")

# The emit statements with the wake-up folded in (OUTBOX_WAKEUP=notify): no extra round
# trip; the test runs only if the statement wrote a delivery.
EMIT_ONE_WAKE = (
    _ONE_VALUES + """,
fan AS (""" + _FAN_OUT + " RETURNING 1)" + _WAKE_IF_IDLE
)
EMIT_ONE_IDEMPOTENT = _emit_one_idempotent(wake=False)
EMIT_ONE_IDEMPOTENT_WAKE = _emit_one_idempotent(wake=True)
EMIT_MANY = _emit_many(wake=False)
EMIT_MANY_WAKE = _emit_many(wake=True)

# Worker side (outbox.delivery.wakeup): the channel to LISTEN on, and the idle lock.
WAKE_CHANNEL_NAME = f"SELECT {WAKE_CHANNEL}"

# --- the SQL function outbox.emit (migrations/0011_sql_emit.sql) ------------------------
# Its one statement: the event's INSERT (PL/pgSQL variables v_id, v_payload, v_ikey and the
# function's arguments) with the fan-out and the wake-up above, tables unqualified (the
# function pins search_path to its schema, whose quoted name it computes for the wake-up's
# lock key and channel, as render() writes it). The routing is this module's text:
# tests/unit/test_sql_emit_text.py fails when the latest migration defining outbox.emit
# does not hold SQL_EMIT_STATEMENT verbatim (a routing change needs a migration
# redefining the function), and tests/integration/test_sql_emit_property.py compares
# the deliveries of both emits over random events and endpoints.
_FN_SCHEMA_NAME = """('"' || current_schema() || '"')"""
SQL_EMIT_STATEMENT = """WITH k AS (
    INSERT INTO event_keys (idempotency_key, event_id)
    SELECT v_ikey, v_id WHERE v_ikey IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING event_id),
ins AS (
    INSERT INTO events (id, type, payload, key, idempotency_key, traceparent, tenant)
    SELECT v_id, emit.type, v_payload::json, emit.key, v_ikey, NULL, emit.tenant
     WHERE v_ikey IS NULL OR EXISTS (SELECT FROM k)
    RETURNING id, type, tenant, key),
fan AS (""" + _fan_out("emit.payload", "", "%") + """ RETURNING 1),
wake AS (""" + _wake_if_idle(_FN_SCHEMA_NAME) + """)
SELECT id FROM ins WHERE (SELECT count(*) FROM wake) >= 0"""
