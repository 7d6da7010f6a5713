"""SQL of the operator functions: dead letters and replay (outbox.admin.deadletter), stats
(outbox.admin.stats), retention (outbox.admin.retention), each scopable to one tenant."""

from __future__ import annotations

from outbox._db.queries.emit import WAKE_CHANNEL, WAKE_KEY

# The order in which a statement that takes several ordered keys' advisory locks takes them
# (migrations/0005_ordered.sql): the lock's own key, not (endpoint, key), so that keys whose
# hashes collide (one lock) are never taken in opposite orders by two statements. Fill
# {ep} and {key} with the column expressions.
ORDERED_LOCK_ORDER = "hashtext('outbox.ordered:' || {ep}::text), hashtext({key})"

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


def _carried(alias: str) -> str:
    """Condition: delivery ``alias`` goes to an endpoint that can carry tenant %(tenant)s's
    events (its own and the all-tenants ones; NULL: every endpoint). Implied by
    :func:`_of_tenant` (an endpoint's tenant and all_tenants are set once, at creation, and
    emit routes a tenant's events only to those), so adding it changes no result; it is a
    cheap filter on the row itself (an array computed once per statement) that the planner
    runs before _of_tenant's probe, so another tenant's rows cost no probe of events."""
    return (f"(%(tenant)s::text IS NULL OR {alias}.endpoint_id = ANY (ARRAY("
            "SELECT cep.id FROM {schema}.endpoints cep"
            " WHERE cep.tenant = %(tenant)s::text OR cep.all_tenants)))")


# --- dead letters (outbox.admin.deadletter) ----------------------------------------------------
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

# Dead deliveries, most recently dead first, a page at a time after the keyset cursor
# (%(at)s, %(after_id)s) = the last row's (finished_at, id); both NULL: the first page. A
# batch dies with one now(), so many rows share a finished_at: the id breaks the tie, and
# the row comparison walks deliveries_dead_by_time_id (0006) from the cursor on.
DEAD_PAGE = (
    """
SELECT d.id, d.event_id, ev.type AS event_type, d.endpoint_id, ep.url, d.attempts,
       d.last_status, d.last_error, d.created_at, d.finished_at
  FROM {schema}.deliveries d
  LEFT JOIN {schema}.events ev ON ev.id = d.event_id
  LEFT JOIN {schema}.endpoints ep ON ep.id = d.endpoint_id
 WHERE"""
    + _DEAD_SELECTION
    + """
   AND (%(at)s::timestamptz IS NULL
        OR (d.finished_at, d.id) < (%(at)s::timestamptz, %(after_id)s::bigint))
 ORDER BY d.finished_at DESC, d.id DESC
 LIMIT %(limit)s
"""
)

# What a replay would touch, per endpoint (dry-run output and the disabled-endpoint check).
# DEAD_SUMMARY_TENANT: the same for a selection with a tenant (and no ids), routed through
# the endpoints that can carry the tenant's events (_carried), each one's dead rows read
# through deliveries_dead (endpoint_id, finished_at): the cost follows those endpoints'
# dead rows, not every tenant's (the plain form probes every dead row's event).
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

DEAD_SUMMARY_TENANT = (
    """
SELECT ep.id AS endpoint_id, ep.url, ep.enabled, ep.disabled_reason, d.count
  FROM {schema}.endpoints ep
 CROSS JOIN LATERAL (
       SELECT count(*) AS count FROM {schema}.deliveries d
        WHERE d.endpoint_id = ep.id AND"""
    + _DEAD_SELECTION
    + """) d
 WHERE (ep.tenant = %(tenant)s::text OR ep.all_tenants) AND d.count > 0
 ORDER BY d.count DESC, ep.id
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
       COALESCE(ep.enabled, false) AS endpoint_enabled,
       (d.state = 'dead' AND d.key IS NOT NULL) AS blocking,
       CASE WHEN d.key IS NOT NULL AND d.state IN ('pending', 'dead') THEN
            (SELECT count(*) FROM {schema}.deliveries w
              WHERE w.endpoint_id = d.endpoint_id AND w.key = d.key
                AND w.state IN ('fresh', 'waiting')) ELSE 0 END AS held_back
  FROM {schema}.deliveries d
  LEFT JOIN {schema}.events ev ON ev.id = d.event_id
  LEFT JOIN {schema}.endpoints ep ON ep.id = d.endpoint_id
 WHERE d.id = %s
"""

# `outbox dead skip`: a dead head of an ordered endpoint's key gives up its key (key set to
# NULL: it stays dead, and a replay of it later sends it unordered), the attempt log says
# so, and the key's next delivery is promoted in the same transaction (ordered_advance,
# migrations/0005_ordered.sql). The rows are locked first, in id order, and checked again
# after the lock: a row replayed or skipped meanwhile is left alone, so skipping twice, or
# racing a replay or a worker, changes nothing more. Returns each locked row's state after.
DEAD_SKIP = """
WITH target AS MATERIALIZED (
    SELECT d.id, d.endpoint_id, d.key, d.state, d.attempts
      FROM {schema}.deliveries d
     WHERE d.id = ANY (%(ids)s::bigint[])
     ORDER BY d.id
       FOR UPDATE),
released AS (
    UPDATE {schema}.deliveries d
       SET key = NULL
      FROM target t
     WHERE d.id = t.id AND t.state = 'dead' AND t.key IS NOT NULL
    RETURNING d.id, t.endpoint_id, t.key, t.attempts),
logged AS (
    INSERT INTO {schema}.delivery_attempts (delivery_id, attempt, outcome, error, worker)
    SELECT id, 0, 'skipped',
           format('skipped after %%s attempts: key %%s released, the deliveries behind it go'
                  ' on without this one', attempts, key),
           %(actor)s
      FROM released),
advanced AS MATERIALIZED (
    SELECT {schema}.ordered_advance(a.endpoint_id, a.key) AS promoted
      FROM (SELECT endpoint_id, key FROM released) a
     ORDER BY """ + ORDERED_LOCK_ORDER.format(ep="a.endpoint_id", key="a.key") + """),
woken AS MATERIALIZED (  -- as emit's wake-up: a NOTIFY only while a worker is idle
    SELECT pg_notify(""" + WAKE_CHANNEL + """, '')
      FROM (SELECT 1 FROM advanced WHERE promoted IS NOT NULL LIMIT 1) p
     WHERE NOT pg_try_advisory_xact_lock_shared(""" + WAKE_KEY + """))
SELECT t.id, t.state, r.id IS NOT NULL AS skipped
  FROM target t LEFT JOIN released r ON r.id = t.id
 WHERE (SELECT count(*) FROM advanced) >= 0 AND (SELECT count(*) FROM woken) >= 0
 ORDER BY t.id
"""
# `outbox dead skip` promotes under the key's lock and needs READ COMMITTED (0005): set it
# first thing in a transaction of its own, or read the caller's transaction's level.
READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
TRANSACTION_ISOLATION = "SELECT current_setting('transaction_isolation')"
# What a skip would touch: state, whether it holds a key, and its event's tenant.
DEAD_SKIP_CHECK = """
SELECT d.id, d.state, d.key IS NOT NULL AS holds_key,
       (SELECT e.tenant FROM {schema}.events e WHERE e.id = d.event_id) AS tenant
  FROM {schema}.deliveries d
 WHERE d.id = ANY (%s::bigint[])
"""

# Every attempt of one delivery, oldest first: the attempt log's rows and a first-try
# success kept on the delivery row (the view delivery_attempt_log, migrations/0019_wal.sql).
DELIVERY_ATTEMPTS = """
SELECT attempt, outcome, status_code, duration_ms, error_class, error, response_excerpt,
       worker, created_at
  FROM {schema}.delivery_attempt_log
 WHERE delivery_id = %s
 ORDER BY created_at, id
"""

# --- stats (outbox.admin.stats) ----------------------------------------------------------------
# Per endpoint. Cost follows the backlog (pending rows, through the deliveries_due partial
# index) plus the last hour's finished rows (deliveries_finished, a range on finished_at);
# the last dead error is one probe of deliveries_dead per endpoint. Never a full scan of
# the history. Ordered endpoints: `waiting` reads the queued rows (fresh, waiting) through
# deliveries_queued_by_key, and the dead heads that block their key come from
# deliveries_key_head: both follow the ordered backlog.
# With %(tenant)s: that tenant's endpoints and the all-tenants ones, counting
# only the deliveries of that tenant's events (_of_tenant: one probe per row read, after
# _carried has dropped the rows of other tenants' endpoints at no probe).
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
     WHERE state = 'pending' AND visible_at <= 'infinity' AND """ + _carried("d") + """
       AND """ + _of_tenant("d") + """
     GROUP BY endpoint_id),
queued AS (
    SELECT endpoint_id, count(*) AS waiting
      FROM {schema}.deliveries d
     WHERE state IN ('fresh', 'waiting') AND """ + _carried("d") + """
       AND """ + _of_tenant("d") + """
     GROUP BY endpoint_id),
held AS (
    SELECT h.endpoint_id, count(*) AS blocked_keys, COALESCE(sum(q.n), 0)::bigint AS blocked
      FROM {schema}.deliveries h
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM {schema}.deliveries w
                          WHERE w.endpoint_id = h.endpoint_id AND w.key = h.key
                            AND w.state IN ('fresh', 'waiting')) q
     WHERE h.key IS NOT NULL AND h.state = 'dead' AND """ + _carried("h") + """
       AND """ + _of_tenant("h") + """
     GROUP BY h.endpoint_id),
recent AS (
    SELECT endpoint_id,
           count(*) FILTER (WHERE state = 'delivered') AS delivered,
           count(*) FILTER (WHERE state = 'dead') AS dead
      FROM {schema}.deliveries d
     WHERE state <> 'pending' AND finished_at > now() - interval '1 hour'
       AND """ + _carried("d") + """ AND """ + _of_tenant("d") + """
     GROUP BY endpoint_id)
SELECT ep.id AS endpoint_id, ep.url, ep.enabled,
       COALESCE(b.pending, 0) AS pending, COALESCE(b.due, 0) AS due,
       COALESCE(b.in_flight, 0) AS in_flight, COALESCE(q.waiting, 0) AS waiting,
       COALESCE(k.blocked, 0) AS blocked, COALESCE(k.blocked_keys, 0) AS blocked_keys,
       COALESCE(r.delivered, 0) AS delivered_1h,
       COALESCE(r.dead, 0) AS dead_1h,
       extract(epoch FROM now() - b.oldest_due)::float8 AS oldest_due_seconds,
       COALESCE(b.retry_error, last_dead.last_error) AS last_error
  FROM {schema}.endpoints ep
  LEFT JOIN backlog b ON b.endpoint_id = ep.id
  LEFT JOIN recent r ON r.endpoint_id = ep.id
  LEFT JOIN queued q ON q.endpoint_id = ep.id
  LEFT JOIN held k ON k.endpoint_id = ep.id
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

# --- retention (outbox.admin.retention) -------------------------------------------------------
PRUNE_CUTOFF = "SELECT now() - make_interval(secs => %s)"

# A dead head that still holds its ordered key (it blocks the key) is never pruned: pruning
# it would release the key unseen; replay or `outbox dead skip` decides.
# "state <> 'pending'" repeats the predicate of the deliveries_finished index so the
# planner walks that index from its oldest end. %(tenant)s (NULL: all) keeps the rows of
# that tenant's events (_of_tenant).
_PRUNABLE = """
    state <> 'pending' AND state = ANY (%(states)s::text[]) AND finished_at < %(cutoff)s
    AND NOT (state = 'dead' AND key IS NOT NULL) AND id < %(below)s::bigint
    AND """ + _of_tenant("d") + "\n"
PRUNE_COUNT = "SELECT count(*) FROM {schema}.deliveries d WHERE" + _PRUNABLE

# Rows the partition drop will take anyway are left to it (prune(partition_width=...): the
# worker's prune): the rows of every partition opened after the cutoff minus one partition
# width, and of those made ahead. Such a partition closes about one width after it opened
# and is dropped one retention after that, so a row of it outlives its own expiry by at
# most one width while the manager keeps time; a partition opened earlier (kept by a
# survivor, or held open by a stalled manager) has its rows deleted one by one as before.
# The result is the first id of the oldest partition left to the drop (the highest bigint
# when there is none).
PRUNE_ROW_BOUND = """
SELECT COALESCE(min(COALESCE(lo, -9223372036854775808)), 9223372036854775807)
  FROM {schema}.delivery_partitions
 WHERE (opened_at IS NULL AND closed_at IS NULL)
    OR opened_at >= %(cutoff)s::timestamptz - make_interval(secs => %(width)s)
"""

# One batch, one short transaction: the oldest finished rows past the cutoff below
# %(below)s (PRUNE_ROW_BOUND; the highest bigint: every row) after the
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
    RETURNING e.id, e.idempotency_key),
keys AS (
    DELETE FROM {schema}.event_keys k USING gone
     WHERE gone.idempotency_key IS NOT NULL AND k.idempotency_key = gone.idempotency_key
       AND k.event_id = gone.id
    RETURNING 1)
SELECT (SELECT id FROM picked ORDER BY id DESC LIMIT 1) AS last_id,
       (SELECT count(*) FROM picked) AS picked, (SELECT count(*) FROM gone) AS deleted,
       (SELECT count(*) FROM keys) AS keys
"""

# The events left to their partitions' drop by the worker's prune (prune(partition_width=
# ...)), as PRUNE_ROW_BOUND for deliveries: the first id of the oldest partition of events
# whose range ends after the cutoff minus two widths (its events' deliveries sit in
# delivery partitions that close within a width of it; the drop takes it once those are
# dropped); a partition older than that, still there, is blocked, and its events are
# deleted one by one as before. The cutoff's own floor when no such partition exists.
PRUNE_EVENT_BOUND = """
SELECT least({schema}.uuid7_floor(%(cutoff)s::timestamptz),
             (SELECT p.lo FROM {schema}.event_partitions p
               WHERE p.lo IS NOT NULL
                 AND p.hi > {schema}.uuid7_floor(%(cutoff)s::timestamptz
                                                 - 2 * make_interval(secs => %(width)s))
               ORDER BY p.lo LIMIT 1))
"""

# Key rotation: every stored secret, re-sealed with the current key, one transaction.
