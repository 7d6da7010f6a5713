"""Every SQL statement of the ``outbox`` package, in one place.

``{schema}`` is replaced by the quoted schema name (:func:`outbox.db.render`); values are
always bound parameters (``%s`` / ``%(name)s``), never formatted into the text.
"""

from __future__ import annotations

# --- emit -------------------------------------------------------------------------------
# The routing rule, written once and used by every emit path: the endpoints in scope of a
# tenant ``t`` are its own enabled endpoints (a tenant-less event: the tenant-less ones)
# plus the enabled all-tenants endpoints. Each branch is an index lookup
# (endpoints_by_tenant, endpoints_all_tenants: migration 0004), so the cost follows the
# tenant's own endpoints, never the number of endpoints or tenants
# (tests/integration/test_routing_plan.py fails on a plan that scans endpoints).


def _scope(t: str) -> str:
    return f"""(
            SELECT p.id, p.event_types FROM {{schema}}.endpoints p
             WHERE p.tenant = {t} AND p.enabled
            UNION ALL
            SELECT p.id, p.event_types FROM {{schema}}.endpoints p
             WHERE {t} IS NULL AND p.tenant IS NULL AND p.enabled AND NOT p.all_tenants
            UNION ALL
            SELECT p.id, p.event_types FROM {{schema}}.endpoints p
             WHERE p.all_tenants AND p.enabled)"""


# A filter is an exact type or a prefix pattern 'invoice.*' (stored as written; '*' alone
# is stored as NULL, every type): outbox.routing validates them at registration.
def _takes(types: str, t: str) -> str:
    return f"""({types} IS NULL OR {t} = ANY ({types})
        OR EXISTS (SELECT FROM unnest({types}) f
                    WHERE f LIKE '%%.*' AND starts_with({t}, left(f, -1))))"""


# Fan-out of the event rows ``ins(id, type, tenant)``, in the same statement as they are
# inserted: one delivery per endpoint in scope whose filter takes the type.
_FAN_OUT = f"""
    INSERT INTO {{schema}}.deliveries (event_id, endpoint_id)
    SELECT ins.id, ep.id
      FROM ins CROSS JOIN LATERAL {_scope("ins.tenant")} ep
     WHERE {_takes("ep.event_types", "ins.type")}
"""

# The same for a batch: the rule runs once per distinct (tenant, type) of the batch, not per
# event (1,000 events over 100 tenants: 100 lookups), then joins back to the events.
# '' stands for "no tenant" in the join key only (a tenant id is never empty).
_FAN_OUT_GROUPED = f"""
    INSERT INTO {{schema}}.deliveries (event_id, endpoint_id)
    SELECT ins.id, r.endpoint_id
      FROM ins JOIN (
            SELECT k.tenant, k.type, ep.id AS endpoint_id
              FROM (SELECT DISTINCT tenant, type FROM ins) k
             CROSS JOIN LATERAL {_scope("k.tenant")} ep
             WHERE {_takes("ep.event_types", "k.type")}) r
        ON COALESCE(r.tenant, '') = COALESCE(ins.tenant, '') AND r.type = ins.type
"""

EMIT_ONE = (
    """
WITH ins AS (
    INSERT INTO {schema}.events (id, type, payload, key, idempotency_key, traceparent, tenant)
    VALUES (%s, %s, %s::json, %s, NULL, %s, %s)
    RETURNING id, type, tenant)
"""
    + _FAN_OUT
)

# With an idempotency key: a conflict inserts nothing and returns the first event's id.
EMIT_ONE_IDEMPOTENT = """
WITH ins AS (
    INSERT INTO {schema}.events (id, type, payload, key, idempotency_key, traceparent, tenant)
    VALUES (%(id)s, %(type)s, %(payload)s::json, %(key)s, %(ikey)s, %(traceparent)s,
            %(tenant)s)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, type, tenant),
fan AS (""" + _FAN_OUT + """)
SELECT id FROM ins
UNION ALL
SELECT id FROM {schema}.events
 WHERE idempotency_key = %(ikey)s AND NOT EXISTS (SELECT 1 FROM ins)
"""

# Bulk: arrays in, one round trip; returns the event id of every input row, in input order.
EMIT_MANY = """
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(types)s::text[], %(payloads)s::text[],
                         %(keys)s::text[], %(ikeys)s::text[], %(traceparents)s::text[],
                         %(tenants)s::text[])
           WITH ORDINALITY AS t(id, type, payload, key, ikey, traceparent, tenant, ord)),
ins AS (
    INSERT INTO {schema}.events (id, type, payload, key, idempotency_key, traceparent, tenant)
    SELECT id, type, payload::json, key, ikey, traceparent, tenant FROM input ORDER BY ord
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, type, tenant),
fan AS (""" + _FAN_OUT_GROUPED + """)
SELECT COALESCE(ins.id, old.id) AS id
  FROM input
  LEFT JOIN ins ON ins.id = input.id
  LEFT JOIN {schema}.events old ON ins.id IS NULL AND old.idempotency_key = input.ikey
 ORDER BY input.ord
"""

# Bulk without idempotency keys: the events and their deliveries by binary COPY (about
# 1.5x the rate of INSERT ... SELECT for the same rows). Which endpoints take which event
# still comes from the rule above, in SQL: ROUTES answers it once per distinct
# (tenant, type) of the batch, and emit.py writes one delivery per (event, route).
COPY_EVENTS = """
COPY {schema}.events (id, type, payload, key, traceparent, tenant) FROM STDIN (FORMAT BINARY)
"""
ROUTES = f"""
SELECT k.tenant, k.type, ep.id AS endpoint_id
  FROM unnest(%(tenants)s::text[], %(types)s::text[]) AS k(tenant, type)
 CROSS JOIN LATERAL {_scope("k.tenant")} ep
 WHERE {_takes("ep.event_types", "k.type")}
"""
COPY_DELIVERIES = "COPY {schema}.deliveries (event_id, endpoint_id) FROM STDIN (FORMAT BINARY)"

# Second look for an idempotency key another transaction committed during our statement.
EVENT_ID_BY_IDEMPOTENCY_KEY = """
SELECT idempotency_key, id FROM {schema}.events WHERE idempotency_key = ANY (%s::text[])
"""

# --- wake-up (issue 18; design, alternatives and figures: outbox/delivery/wakeup.py) ----
# An idle worker holds the session advisory lock WAKE_KEY (exclusive) or waits for it. An
# emitting transaction that wrote deliveries tries WAKE_KEY shared for the rest of its
# transaction: if that fails, a worker is idle, and it sends ONE payload-less pg_notify
# (PostgreSQL folds identical notifications of one transaction into one). If it succeeds,
# every worker is busy claiming, nobody needs waking, and the transaction commits without
# NOTIFY's database-wide commit lock; the shared lock it holds until commit makes a worker
# that wants to go idle wait for that commit, then claim once more, so no event is missed.
# Scope: advisory locks and channels are per database; the key and channel name hash the
# schema ('{schema}' renders as the quoted name: a string constant here).
WAKE_KEY = "hashtext('outbox.wakeup'), hashtext('{schema}')"
WAKE_CHANNEL = "'outbox_wakeup_' || left(md5('{schema}'), 16)"
_WAKE_IF_IDLE = f"""
SELECT pg_notify({WAKE_CHANNEL}, '') FROM (SELECT 1 FROM fan LIMIT 1) wrote
 WHERE NOT pg_try_advisory_xact_lock_shared({WAKE_KEY})"""
# emit_many's COPY path: the same test as its own statement, after the deliveries' COPY.
WAKE = (f"SELECT pg_notify({WAKE_CHANNEL}, '')"
        f" WHERE NOT pg_try_advisory_xact_lock_shared({WAKE_KEY})")

# The emit statements with the wake-up folded in (OUTBOX_WAKEUP=notify): no extra round
# trip; the test runs only if the statement wrote a delivery.
EMIT_ONE_WAKE = (
    """
WITH ins AS (
    INSERT INTO {schema}.events (id, type, payload, key, idempotency_key, traceparent, tenant)
    VALUES (%s, %s, %s::json, %s, NULL, %s, %s)
    RETURNING id, type, tenant),
fan AS (""" + _FAN_OUT + " RETURNING 1)" + _WAKE_IF_IDLE
)
EMIT_ONE_IDEMPOTENT_WAKE = EMIT_ONE_IDEMPOTENT.replace(
    "fan AS (" + _FAN_OUT + ")",
    "fan AS (" + _FAN_OUT + " RETURNING 1),\nwake AS (" + _WAKE_IF_IDLE + ")",
).replace("SELECT id FROM ins\n", "SELECT id FROM ins WHERE (SELECT count(*) FROM wake) >= 0\n")
EMIT_MANY_WAKE = EMIT_MANY.replace(
    "fan AS (" + _FAN_OUT_GROUPED + ")",
    "fan AS (" + _FAN_OUT_GROUPED + " RETURNING 1),\nwake AS (" + _WAKE_IF_IDLE + ")",
).replace("  FROM input\n", "  FROM input LEFT JOIN (SELECT count(*) FROM wake) w ON true\n")
assert all(q.count("FROM wake)") == 1 for q in (EMIT_ONE_IDEMPOTENT_WAKE, EMIT_MANY_WAKE))

# Worker side (outbox.delivery.wakeup): the channel to LISTEN on, and the idle lock.
WAKE_CHANNEL_NAME = f"SELECT {WAKE_CHANNEL}"

# --- endpoints --------------------------------------------------------------------------
_ENDPOINT_COLUMNS = """
    id, url, description, tenant, all_tenants, event_types, headers, enabled, disabled_reason,
    max_attempts, retry_base_seconds, retry_cap_seconds, timeout_seconds, max_in_flight,
    previous_secret_expires_at, created_at, updated_at
"""

ENDPOINT_INSERT = (
    """
INSERT INTO {schema}.endpoints
    (id, url, description, tenant, all_tenants, secret, event_types, headers,
     max_attempts, retry_base_seconds, retry_cap_seconds, timeout_seconds, max_in_flight)
VALUES (%(id)s, %(url)s, %(description)s, %(tenant)s, %(all_tenants)s, %(secret)s,
        %(event_types)s, %(headers)s,
        %(max_attempts)s, %(retry_base_seconds)s, %(retry_cap_seconds)s,
        %(timeout_seconds)s, %(max_in_flight)s)
RETURNING"""
    + _ENDPOINT_COLUMNS
)

ENDPOINT_LIST = "SELECT" + _ENDPOINT_COLUMNS + "FROM {schema}.endpoints ORDER BY created_at, id"
# One tenant's endpoints (by endpoints_by_tenant).
ENDPOINT_LIST_TENANT = (
    "SELECT" + _ENDPOINT_COLUMNS + "FROM {schema}.endpoints WHERE tenant = %s"
    " ORDER BY created_at, id"
)

ENDPOINT_GET = "SELECT" + _ENDPOINT_COLUMNS + "FROM {schema}.endpoints WHERE id = %s"

# Disabling parks the endpoint's idle pending deliveries (visible_at = infinity) so claims
# skip them at no cost; enabling makes parked ones due at once. Leased rows finish normally.
ENDPOINT_SET_ENABLED = (
    """
WITH ep AS (
    UPDATE {schema}.endpoints
       SET enabled = %(enabled)s, disabled_reason = %(reason)s, updated_at = now()
     WHERE id = %(id)s
    RETURNING"""
    + _ENDPOINT_COLUMNS
    + """),
parked AS (
    UPDATE {schema}.deliveries d
       SET visible_at = CASE WHEN %(enabled)s THEN now() ELSE 'infinity' END
      FROM ep
     WHERE d.endpoint_id = ep.id AND d.state = 'pending'
       AND CASE WHEN %(enabled)s THEN d.visible_at = 'infinity'
                ELSE d.visible_at <= now() OR d.lease_token IS NULL END)
SELECT * FROM ep
"""
)

# Partial update: NULL keeps a column; the flags say whether to replace the type filter
# (NULL there means every type) and whether to drop the old headers before merging new ones.
ENDPOINT_UPDATE = (
    """
UPDATE {schema}.endpoints
   SET url = COALESCE(%(url)s::text, url),
       description = COALESCE(%(description)s::text, description),
       event_types = CASE WHEN %(set_types)s THEN %(event_types)s::text[] ELSE event_types END,
       headers = CASE WHEN %(clear_headers)s THEN '{{}}'::jsonb ELSE headers END
                 || %(headers)s::jsonb,
       max_attempts = COALESCE(%(max_attempts)s::integer, max_attempts),
       retry_base_seconds = COALESCE(%(retry_base_seconds)s::float8, retry_base_seconds),
       retry_cap_seconds = COALESCE(%(retry_cap_seconds)s::float8, retry_cap_seconds),
       timeout_seconds = COALESCE(%(timeout_seconds)s::float8, timeout_seconds),
       updated_at = now()
 WHERE id = %(id)s
RETURNING"""
    + _ENDPOINT_COLUMNS
)

# Rotation: the current secret becomes the previous one, which keeps signing beside the
# new one until it expires (the claim sends it while previous_secret_expires_at > now()).
# Refused (no row) while an earlier rotation's grace is still running, unless forced.
ENDPOINT_ROTATE_SECRET = (
    """
UPDATE {schema}.endpoints
   SET previous_secret = secret,
       previous_secret_expires_at = now() + make_interval(secs => %(grace)s),
       secret = %(secret)s,
       updated_at = now()
 WHERE id = %(id)s
   AND (%(force)s OR previous_secret_expires_at IS NULL OR previous_secret_expires_at <= now())
RETURNING"""
    + _ENDPOINT_COLUMNS
)

# The secrets that sign a request to this endpoint now (for `outbox endpoints ping`).
ENDPOINT_SIGNING_SECRETS = """
SELECT secret, CASE WHEN previous_secret_expires_at > now() THEN previous_secret END
  FROM {schema}.endpoints WHERE id = %s
"""

# --- tenant scoping (operator commands: dead list, replay, stats, prune) -----------------


def _of_tenant(alias: str) -> str:
    """Condition: delivery ``alias`` belongs to tenant %(tenant)s (NULL: every tenant).

    A delivery belongs to the tenant of its EVENT (an all-tenants endpoint carries many
    tenants' rows), so this is one primary-key probe of events per row the surrounding
    index walk reaches. It is a correlated scalar subquery on purpose: PostgreSQL keeps it
    a per-row subplan, never a join it might run as a scan of the whole events table, so
    the cost follows the rows the statement's own index reads (backlog, dead rows, finished
    rows past retention), not the history.
    """
    return (f"(%(tenant)s::text IS NULL OR (SELECT tev.tenant FROM {{schema}}.events tev"
            f" WHERE tev.id = {alias}.event_id) = %(tenant)s::text)")


# --- dead letters (outbox.deadletter) ----------------------------------------------------
# Every selector is optional: a NULL parameter switches its condition off. Run these
# unprepared (prepare=False) so each execution is planned with its actual values and the
# switched-off conditions fold away (a generic plan could not use the partial indexes).
# The dead-only partial indexes (0001 deliveries_dead, 0002) keep them off delivered rows.
_DEAD_SELECTION = """
       d.state = 'dead'
   AND (%(endpoint)s::uuid IS NULL OR d.endpoint_id = %(endpoint)s::uuid)
   AND (%(since)s::timestamptz IS NULL OR d.finished_at >= %(since)s::timestamptz)
   AND (%(until)s::timestamptz IS NULL OR d.finished_at < %(until)s::timestamptz)
   AND (%(ids)s::bigint[] IS NULL OR d.id = ANY (%(ids)s::bigint[]))
   AND (%(event_type)s::text IS NULL OR EXISTS (
            SELECT 1 FROM {schema}.events t
             WHERE t.id = d.event_id AND t.type = %(event_type)s::text))
   AND """ + _of_tenant("d") + "\n"

DEAD_LIST = (
    """
SELECT d.id, d.event_id, ev.type AS event_type, d.endpoint_id, ep.url, d.attempts,
       d.last_status, d.last_error, d.created_at, d.finished_at
  FROM {schema}.deliveries d
  LEFT JOIN {schema}.events ev ON ev.id = d.event_id
  LEFT JOIN {schema}.endpoints ep ON ep.id = d.endpoint_id
 WHERE"""
    + _DEAD_SELECTION
    + """
 ORDER BY d.finished_at DESC, d.id DESC
 LIMIT %(limit)s
"""
)

# What a replay would touch, per endpoint (dry-run output and the disabled-endpoint check).
DEAD_SUMMARY = (
    """
SELECT d.endpoint_id, ep.url, COALESCE(ep.enabled, false) AS enabled, ep.disabled_reason,
       count(*) AS count
  FROM {schema}.deliveries d
  LEFT JOIN {schema}.endpoints ep ON ep.id = d.endpoint_id
 WHERE"""
    + _DEAD_SELECTION
    + """
 GROUP BY d.endpoint_id, ep.url, ep.enabled, ep.disabled_reason
 ORDER BY count(*) DESC, d.endpoint_id
"""
)

DELIVERY_STATES = "SELECT id, state FROM {schema}.deliveries WHERE id = ANY (%s::bigint[])"

# One replay batch, one short transaction: the next `limit` selected rows after the keyset
# cursor `after` (by id). Rows are locked in id order (concurrent replays queue behind each
# other instead of deadlocking), and a row whose lock had to be waited for is re-checked
# against the selection: one replayed meanwhile, or already pending (claimed, leased) is
# left alone, so there is one row per (event, endpoint) and never two pending copies.
# Each replayed row gets an attempt-log entry (attempt 0, outcome 'replayed') saying what
# it died of.
REPLAY_BATCH = (
    """
WITH picked AS MATERIALIZED (
    SELECT d.id, d.attempts, d.last_status, d.last_error
      FROM {schema}.deliveries d
     WHERE"""
    + _DEAD_SELECTION
    + """
       AND d.id > %(after)s
     ORDER BY d.id
     LIMIT %(limit)s
       FOR UPDATE),
replayed AS (
    UPDATE {schema}.deliveries d
       SET state = 'pending', attempts = 0, visible_at = now(), lease_token = NULL,
           finished_at = NULL, last_status = NULL, last_error = NULL
      FROM picked
     WHERE d.id = picked.id AND d.state = 'dead'
    RETURNING d.id, picked.attempts, picked.last_status, picked.last_error),
logged AS (
    INSERT INTO {schema}.delivery_attempts
        (delivery_id, attempt, outcome, status_code, error_class, error, worker)
    SELECT id, 0, 'replayed', last_status, NULL,
           format('replayed after %%s attempts; was dead with: %%s', attempts,
                  COALESCE(last_error, '-')),
           %(actor)s
      FROM replayed)
SELECT COALESCE((SELECT max(id) FROM picked), 0) AS last_id,
       (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM replayed) AS replayed
"""
)

DELIVERY_GET = """
SELECT d.id, d.event_id, d.endpoint_id, d.state, d.attempts, d.visible_at,
       d.lease_token IS NOT NULL AS leased, d.last_status, d.last_error, d.created_at,
       d.finished_at, ev.type AS event_type, ev.payload::text AS payload, ev.key AS event_key,
       ev.created_at AS emitted_at, ep.url AS endpoint_url,
       COALESCE(ep.enabled, false) AS endpoint_enabled
  FROM {schema}.deliveries d
  LEFT JOIN {schema}.events ev ON ev.id = d.event_id
  LEFT JOIN {schema}.endpoints ep ON ep.id = d.endpoint_id
 WHERE d.id = %s
"""

DELIVERY_ATTEMPTS = """
SELECT attempt, outcome, status_code, duration_ms, error_class, error, response_excerpt,
       worker, created_at
  FROM {schema}.delivery_attempts
 WHERE delivery_id = %s
 ORDER BY id
"""

# --- stats (outbox.stats) ----------------------------------------------------------------
# Per endpoint. Cost follows the backlog (pending rows, through the deliveries_due partial
# index) plus the last hour's finished rows (deliveries_finished, a range on finished_at);
# the last dead error is one probe of deliveries_dead per endpoint. Never a full scan of
# the history. With %(tenant)s: that tenant's endpoints and the all-tenants ones, counting
# only the deliveries of that tenant's events (_of_tenant: one probe per row read).
STATS_BY_ENDPOINT = """
WITH backlog AS (
    SELECT endpoint_id,
           count(*) AS pending,
           count(*) FILTER (WHERE visible_at <= now()) AS due,
           count(*) FILTER (WHERE lease_token IS NOT NULL AND visible_at > now()) AS in_flight,
           min(visible_at) FILTER (WHERE visible_at <= now()) AS oldest_due,
           (array_agg(last_error ORDER BY attempts DESC)
                FILTER (WHERE last_error IS NOT NULL))[1] AS retry_error
      FROM {schema}.deliveries d
     WHERE state = 'pending' AND visible_at <= 'infinity' AND """ + _of_tenant("d") + """
     GROUP BY endpoint_id),
recent AS (
    SELECT endpoint_id,
           count(*) FILTER (WHERE state = 'delivered') AS delivered,
           count(*) FILTER (WHERE state = 'dead') AS dead
      FROM {schema}.deliveries d
     WHERE state <> 'pending' AND finished_at > now() - interval '1 hour'
       AND """ + _of_tenant("d") + """
     GROUP BY endpoint_id)
SELECT ep.id AS endpoint_id, ep.url, ep.enabled,
       COALESCE(b.pending, 0) AS pending, COALESCE(b.due, 0) AS due,
       COALESCE(b.in_flight, 0) AS in_flight, COALESCE(r.delivered, 0) AS delivered_1h,
       COALESCE(r.dead, 0) AS dead_1h,
       extract(epoch FROM now() - b.oldest_due)::float8 AS oldest_due_seconds,
       COALESCE(b.retry_error, last_dead.last_error) AS last_error
  FROM {schema}.endpoints ep
  LEFT JOIN backlog b ON b.endpoint_id = ep.id
  LEFT JOIN recent r ON r.endpoint_id = ep.id
  LEFT JOIN LATERAL (
        SELECT d.last_error FROM {schema}.deliveries d
         WHERE d.endpoint_id = ep.id AND d.state = 'dead' AND """ + _of_tenant("d") + """
         ORDER BY d.finished_at DESC LIMIT 1) last_dead ON true
 WHERE %(tenant)s::text IS NULL OR ep.tenant = %(tenant)s::text OR ep.all_tenants
 ORDER BY ep.created_at, ep.id
"""

# For alerts and autoscalers: how many deliveries are due and how late the oldest one is.
# Both read only the deliveries_due partial index (its size follows the backlog); the
# age is its first entry (NULL when nothing is due; never negative: visible_at <= now()).
STATS_DUE = """
SELECT count(*) AS due,
       extract(epoch FROM now() - min(visible_at))::float8 AS oldest_due_seconds
  FROM {schema}.deliveries d
 WHERE state = 'pending' AND visible_at <= now() AND """ + _of_tenant("d") + """
"""

# The tenants with the most due deliveries (NULL: tenant-less events), each with the wait
# of its oldest. It reads the due rows through deliveries_due and probes each one's event
# by primary key (a per-row subplan, never a join that could scan events). Unscoped it
# counts the oldest 10,000 due rows only (LIMIT 10000), so a --watch of a huge backlog
# stays cheap, and the tenants that dominate the head of the queue are the ones shown;
# scoped to a tenant it counts all that tenant's due rows (LIMIT NULL: no limit), at a
# cost that follows the due backlog, never the history.
STATS_TOP_TENANTS = """
SELECT tenant, count(*) AS due,
       extract(epoch FROM now() - min(visible_at))::float8 AS oldest_due_seconds
  FROM (SELECT d.visible_at,
               (SELECT e.tenant FROM {schema}.events e WHERE e.id = d.event_id) AS tenant
          FROM {schema}.deliveries d
         WHERE d.state = 'pending' AND d.visible_at <= now()
         ORDER BY d.visible_at
         LIMIT CASE WHEN %(tenant)s::text IS NULL THEN 10000 END) due
 WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
 GROUP BY tenant
 ORDER BY count(*) DESC, min(visible_at), tenant NULLS FIRST
 LIMIT %(limit)s
"""

# --- retention (outbox.retention) -------------------------------------------------------
PRUNE_CUTOFF = "SELECT now() - make_interval(secs => %s)"

# "state <> 'pending'" repeats the predicate of the deliveries_finished index so the
# planner walks that index from its oldest end. %(tenant)s (NULL: all) keeps the rows of
# that tenant's events (_of_tenant).
_PRUNABLE = """
    state <> 'pending' AND state = ANY (%(states)s::text[]) AND finished_at < %(cutoff)s
    AND """ + _of_tenant("d") + "\n"
PRUNE_COUNT = "SELECT count(*) FROM {schema}.deliveries d WHERE" + _PRUNABLE

# One batch, one short transaction: the oldest finished rows past the cutoff after the
# keyset cursor (%(after_at)s, %(after_id)s), and their attempt logs. The cursor moves past
# what a batch examined, so rows left behind (another tenant's, or SKIP LOCKED: a row an
# operator is replaying right now, left for a later run) are never read twice.
PRUNE_DELIVERIES_BATCH = """
WITH picked AS MATERIALIZED (
    SELECT id, finished_at FROM {schema}.deliveries d
     WHERE""" + _PRUNABLE + """
       AND (finished_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
     ORDER BY finished_at, id
     LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED),
gone AS (
    DELETE FROM {schema}.deliveries d USING picked WHERE d.id = picked.id RETURNING d.id),
log AS (
    DELETE FROM {schema}.delivery_attempts a USING gone
     WHERE a.delivery_id = gone.id RETURNING 1)
SELECT last.finished_at AS last_at, COALESCE(last.id, 0) AS last_id,
       (SELECT count(*) FROM picked) AS picked,
       (SELECT count(*) FROM gone) AS deliveries, (SELECT count(*) FROM log) AS attempts
  FROM (SELECT NULL) one
  LEFT JOIN (SELECT finished_at, id FROM picked ORDER BY finished_at DESC, id DESC LIMIT 1)
       last ON true
"""

# Events are found by primary-key range: ids are UUIDv7, so every id below `bound` (the
# cutoff's millisecond in the UUIDv7 layout) was made before the cutoff; created_at is
# re-checked on each row in case the emitting host's clock ran slow. Deliveries are only
# ever inserted together with their event, so an old event never gains new ones.
# %(tenant)s (NULL: all) deletes only that tenant's events; the cursor still moves over
# every id examined.
PRUNE_EVENTS_BATCH = """
WITH picked AS MATERIALIZED (
    SELECT id FROM {schema}.events
     WHERE id > %(after)s AND id < %(bound)s
     ORDER BY id
     LIMIT %(limit)s),
gone AS (
    DELETE FROM {schema}.events e USING picked
     WHERE e.id = picked.id AND e.created_at < %(cutoff)s
       AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s::text)
       AND NOT EXISTS (SELECT 1 FROM {schema}.deliveries d WHERE d.event_id = e.id)
    RETURNING e.id)
SELECT (SELECT id FROM picked ORDER BY id DESC LIMIT 1) AS last_id,
       (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM gone) AS deleted
"""

# Key rotation: every stored secret, re-sealed with the current key, one transaction.
ENDPOINT_SECRETS_FOR_UPDATE = """
SELECT id, secret, previous_secret FROM {schema}.endpoints ORDER BY id FOR UPDATE
"""
ENDPOINT_SET_SECRETS = """
UPDATE {schema}.endpoints SET secret = %s, previous_secret = %s WHERE id = %s
"""

# --- migrations -------------------------------------------------------------------------
MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
"""
CREATE_SCHEMA = "CREATE SCHEMA IF NOT EXISTS {schema}"
SET_SEARCH_PATH = "SET LOCAL search_path TO {schema}, public"
# Two processes migrating the same schema at once: the second waits, then finds nothing to do.
MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext('outbox.migrate'), hashtext(%s))"
MIGRATIONS_APPLIED = "SELECT version, name, checksum FROM {schema}.schema_migrations"
MIGRATION_RECORD = """
INSERT INTO {schema}.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)
"""

# --- inbox: the receiving side (outbox.inbox; migrations/inbox_*.sql) -------------------
# Recorded in the caller's transaction. A concurrent duplicate blocks on the first's
# uncommitted key until it commits (conflict: nothing inserted, no row returned) or rolls
# back (inserted: one row returned).
INBOX_RECORD = """
INSERT INTO {schema}.inbox (source, webhook_id) VALUES (%s, %s)
ON CONFLICT (source, webhook_id) DO NOTHING
RETURNING true
"""
# One short batch: the oldest rows received before the cutoff.
INBOX_PRUNE_BATCH = """
DELETE FROM {schema}.inbox i
 USING (SELECT source, webhook_id FROM {schema}.inbox
         WHERE received_at < %(cutoff)s ORDER BY received_at LIMIT %(limit)s) old
 WHERE i.source = old.source AND i.webhook_id = old.webhook_id
"""
INBOX_MIGRATIONS_TABLE = MIGRATIONS_TABLE.replace("schema_migrations", "inbox_migrations")
INBOX_MIGRATIONS_APPLIED = MIGRATIONS_APPLIED.replace("schema_migrations", "inbox_migrations")
INBOX_MIGRATION_RECORD = MIGRATION_RECORD.replace("schema_migrations", "inbox_migrations")
