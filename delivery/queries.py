"""Every SQL statement of the ``delivery`` package. ``{schema}`` is the quoted schema."""

from __future__ import annotations

from outbox._db import queries as core

# The claim: lease up to %(limit)s due deliveries, fairly across endpoints.
#
# Leases. Each claimed row's visible_at moves to now() + lease, so a crashed worker's rows
# come back once the lease expires (no reaper, no heartbeat); lease_token is this claim's
# fencing token. FOR UPDATE SKIP LOCKED: concurrent claims never take the same row.
#
# Fairness (the noisy neighbour). A single FIFO by visible_at hands a burst of
# 100,000 rows for one endpoint to every claim until it drains, so every other endpoint
# waits behind it. This claim takes rows in two parts:
#
# 1. ring: a rotation over the endpoints that have pending rows, a skip scan over the
#    partial index deliveries_pending_by_endpoint (endpoint_id, visible_at): each step
#    is one index descent to the first entry of the next endpoint_id, which is also
#    that endpoint's oldest pending visible_at. It starts just after the endpoint where
#    this connection's previous claim stopped, wraps around once, and stops after
#    %(limit)s endpoints with due rows or greatest(4 * limit, 100) endpoints in all
#    (endpoints holding only future rows, such as scheduled retries, are passed over at
#    one descent each, and a busy worker's small claims still look past a crowd of them).
#    picked: from each visited endpoint whose oldest row is due,
#    its k oldest due rows (one descent each), k = limit / (due endpoints visited), so
#    the ring never takes more than limit rows; never more than the endpoint's budget
#    (BUDGET, below: this process's free slots there and the endpoint's send tokens).
# 2. fill: the rest of the capacity from the global oldest-due FIFO (the partial index
#    deliveries_due: its oldest 2 * limit due rows, read unlocked, then locked by primary
#    key with SKIP LOCKED and re-checked), skipping the rows the ring took (SKIP LOCKED
#    does not skip this transaction's own locks) and each endpoint's rows beyond what is
#    left of its budget. A lone burst still drains at full claim size, up to its budget.
#
# Fairness unit: the endpoint (so the tenant, as far as tenants have their own
# endpoints). While at most `limit` endpoints have due rows and at most
# greatest(4 * limit, 100) have pending rows, every claim visits all of them: a quiet
# endpoint's due row is claimed by the next claim, whatever the backlog of the others.
# With more, each connection's ring moves on by up to `limit` due endpoints a claim, so
# every endpoint with due work is visited within ceil(endpoints with due rows / limit)
# claims of a connection, or ceil(endpoints with pending rows / greatest(4 * limit, 100))
# when most hold only future rows (and sooner through the fill, if its rows are oldest).
# Endpoints whose rows are all parked (visible_at = infinity: disabled) are not in the
# index and cost the ring nothing;
# endpoints with only future rows (retries, leases, an open breaker) cost one descent.
#
# Cost: at most greatest(4 * limit, 100) descents for the ring, `limit` for picked, and a
# fill that walks the due index from its oldest entry past the rows the ring took and the
# rows other claims hold locked (SKIP LOCKED steps over them), plus the updates:
# proportional to the claim and the concurrency, not to the backlog, the history or the
# number of endpoints (tests/integration/
# test_claim_plan.py: EXPLAIN with 5,000 endpoints, 50,000 delivered rows; bench.history).
#
# The rotation's position is a transaction-local setting (outbox.claim_after): the worker
# sets it before the claim (CLAIM_POSITION_SET), the claim moves it (set_config in
# `share`) and the worker reads it back after (CLAIM_POSITION_GET), all in the claim's one
# pipelined transaction (outbox.delivery.connections): the result's columns are Job's
# fields, so the claim cannot report where the ring stopped, and a random start would not
# rotate: endpoint ids are UUIDv7 (time-ordered), so a random uuid falls above nearly all
# of them and every claim would begin at the oldest endpoint. A worker process rotates as
# one, from the lowest endpoint id at its start; nothing is left on the server connection.
#
# Alternatives considered: a per-tenant or per-endpoint queue table (a second write on
# every emit and a hot row per busy endpoint); DISTINCT ON / GROUP BY endpoint_id over the
# due rows (reads the whole backlog); a window function ranking each endpoint's due rows
# (same); the skip scan with visible_at <= now() in the step (walks every not-due row of
# the endpoints it passes: unbounded); a random start (see above).
#
# Plan shape, pinned rather than left to statistics (stale when autovacuum lags or is
# off): every CTE that locks is MATERIALIZED, and the UPDATE finds its rows by primary key
# (= ANY of the claimed ids), so the planner cannot lock or update more rows than the
# LIMITs (PostgreSQL bug #15715); each claimed row fetches its event and endpoint by
# primary key (LATERAL ... LIMIT 1 cannot be flattened into a hash join). The update's
# one-time condition on `share` makes the rotation's position advance on every claim,
# even one that takes nothing through the ring.
#
# Ordered endpoints (design in migrations/0005_ordered.sql): `fresh` takes the
# oldest greatest(4 * limit, 100) 'fresh' deliveries (committed emits to ordered endpoints,
# not yet placed), one descent of the partial index deliveries_fresh each (a keyset walk:
# a plain ORDER BY id LIMIT n lets statistics that under- or overstate the fresh rows pick
# a bitmap scan and a sort of every fresh row), and `placed` hands each
# key's ids to ordered_place, keys in their advisory locks' order: a key without a head
# gets its oldest queued delivery as head ('pending'), and the given rows become 'waiting'
# (by primary key; the key's other fresh rows stay fresh for a later claim). A key whose
# lock another transaction holds is passed over (a try lock), its rows stay fresh. What it
# promotes is claimable from the next claim on (this statement's snapshot does not see it;
# NEXT_DUE reports fresh rows as due, so an idle worker claims again at once). Its cost:
# one descent of the empty partial index deliveries_fresh when nothing is fresh; else per
# key one probe of deliveries_key_head and one of deliveries_queued_by_key, and an update
# of the picked rows: O(limit) rows, never a key's backlog. 'fresh' and 'waiting' rows
# are in neither claim index: a key's backlog behind its head (retrying, or dead) costs
# the ring and the fill nothing.
# Its columns are named after Job's fields (outbox.delivery.store.job_row matches them by
# name and refuses a result that is not a Job); the secrets are opened in Python.

# The claim's per-endpoint budgets (its `budget` CTE): for each endpoint the claim may take
# rows of (the ring's due endpoints and the fill's candidates), how many it may take:
#   slots:  this process's free in-flight slots there, its cap (max_in_flight, else
#           %(default_cap)s) minus what it has in flight (%(used_ids)s / %(used_counts)s;
#           an endpoint whose breaker is open here is passed with a huge count: 0 slots);
#   tokens: when the endpoint is flow-controlled (a fixed rate limit, an adaptive rate in
#           force, a Retry-After pause: migrations/0008_flow_control.sql), the whole
#           endpoint's send budget across every process: its endpoint_flow row, locked
#           FOR UPDATE SKIP LOCKED (a row another claim holds gives 0 this time), refilled
#           at the rate since refilled_at up to the burst; `took` writes back what is left.
# So a process never claims rows it cannot start at once, and rows beyond the budget stay
# in the database (no claim, no hand-back write). Each endpoint costs two primary-key
# probes of endpoints and endpoint_flow (a third, the lock, when controlled).
# The adaptive rate (AIMD) grows linearly from the last decrease and stops applying 60 s
# after it; a fixed limit is its ceiling. While it applies the burst is 0.1 s of it (at
# least 1): a throttled endpoint gets an even flow, not a second's worth at once (a
# receiver counting a sliding second would see rate + burst and answer 429 again).
BUDGET = """
    SELECT e.endpoint_id, s.metered,
           greatest(0, least(COALESCE(ep.max_in_flight, %(default_cap)s) - COALESCE(u.n, 0),
                             CASE WHEN NOT s.controlled THEN 2147483647
                                  WHEN fl.endpoint_id IS NULL
                                       OR fl.paused_until > now() THEN 0
                                  WHEN r.rate IS NULL THEN 2147483647
                                  ELSE floor(r.tokens) END))::int AS n,
           r.tokens
      FROM (SELECT endpoint_id FROM ring WHERE oldest <= now()
            UNION SELECT endpoint_id FROM cand) e
     CROSS JOIN LATERAL (
          SELECT max_in_flight, rate_burst, least(rate_limit, tenant_rate_limit) AS fixed
            FROM {schema}.endpoints p WHERE p.id = e.endpoint_id LIMIT 1) ep
      LEFT JOIN LATERAL (
          SELECT f.paused_until, f.decreased_at FROM {schema}.endpoint_flow f
           WHERE f.endpoint_id = e.endpoint_id LIMIT 1) seen ON true
     CROSS JOIN LATERAL (
          SELECT COALESCE(ep.fixed IS NOT NULL OR seen.paused_until > now()
                          OR seen.decreased_at > now() - interval '60 seconds', false)
                     AS controlled) c0
      LEFT JOIN LATERAL (
          SELECT * FROM {schema}.endpoint_flow f
           WHERE f.endpoint_id = e.endpoint_id AND c0.controlled
             FOR UPDATE SKIP LOCKED) fl ON true
     CROSS JOIN LATERAL (
          SELECT c0.controlled, fl.endpoint_id IS NOT NULL AS metered) s
     CROSS JOIN LATERAL (
          SELECT CASE WHEN fl.decreased_at > now() - interval '60 seconds'
                      THEN fl.adaptive_rate + COALESCE(fl.increase_per_second, 0)
                           * EXTRACT(EPOCH FROM now() - fl.decreased_at)::float8
                 END AS adaptive) a
     CROSS JOIN LATERAL (
          SELECT least(ep.fixed, a.adaptive) AS rate,
                 greatest(1, CASE WHEN a.adaptive IS NULL THEN COALESCE(ep.rate_burst, ep.fixed)
                                  ELSE 0.1 * least(ep.fixed, a.adaptive) END) AS burst) rb
     CROSS JOIN LATERAL (
          SELECT rb.rate,
                 least(rb.burst, fl.tokens + rb.rate * greatest(0, EXTRACT(
                     EPOCH FROM now() - fl.refilled_at)::float8)) AS tokens) r
      LEFT JOIN (SELECT * FROM unnest(%(used_ids)s::uuid[], %(used_counts)s::int[])
                   AS u(endpoint_id, n)) u ON u.endpoint_id = e.endpoint_id
"""

_PENDING = "state = 'pending' AND visible_at < 'infinity'"  # deliveries_pending_by_endpoint
_LAST_UUID = "'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid"
CLAIM = ("""
WITH RECURSIVE ring (endpoint_id, oldest, n, due, wrapped, after) AS (
    (SELECT head.endpoint_id, head.visible_at, 1, (head.visible_at <= now())::int,
            head.wrapped, cur.after
       FROM (SELECT NULLIF(current_setting('outbox.claim_after', true), '')::uuid
                 AS after) cur
      CROSS JOIN LATERAL (
          (SELECT endpoint_id, visible_at, false AS wrapped FROM {schema}.deliveries
            WHERE PENDING AND endpoint_id > cur.after
            ORDER BY endpoint_id, visible_at LIMIT 1)
          UNION ALL
          (SELECT endpoint_id, visible_at, true FROM {schema}.deliveries
            WHERE PENDING
            ORDER BY endpoint_id, visible_at LIMIT 1)
          LIMIT 1) head)
  UNION ALL
    SELECT nxt.endpoint_id, nxt.visible_at, r.n + 1, r.due + (nxt.visible_at <= now())::int,
           nxt.wrapped, r.after
      FROM ring r
     CROSS JOIN LATERAL (
          (SELECT endpoint_id, visible_at, r.wrapped AS wrapped FROM {schema}.deliveries
            WHERE PENDING AND endpoint_id > r.endpoint_id
              AND endpoint_id <= CASE WHEN r.wrapped THEN COALESCE(r.after, LAST_UUID)
                                      ELSE LAST_UUID END
            ORDER BY endpoint_id, visible_at LIMIT 1)
          UNION ALL
          (SELECT endpoint_id, visible_at, true FROM {schema}.deliveries
            WHERE NOT r.wrapped AND PENDING AND endpoint_id <= r.after
            ORDER BY endpoint_id, visible_at LIMIT 1)
          LIMIT 1) nxt
     WHERE r.due < %(limit)s AND r.n < greatest(4 * %(limit)s, 100)),
share AS MATERIALIZED (
    SELECT %(limit)s / greatest(count(*) FILTER (WHERE oldest <= now()), 1) AS k,
           set_config('outbox.claim_after',
                      COALESCE((array_agg(endpoint_id ORDER BY n DESC))[1]::text,
                               current_setting('outbox.claim_after', true), ''),
                      true) AS after
      FROM ring),
cand AS MATERIALIZED (
    SELECT id, endpoint_id, visible_at FROM {schema}.deliveries
     WHERE state = 'pending' AND visible_at <= now()
     ORDER BY visible_at
     LIMIT 2 * %(limit)s),
budget AS MATERIALIZED (""" + BUDGET + """),
picked AS MATERIALIZED (
    SELECT p.id, r.endpoint_id
      FROM ring r
      JOIN budget b ON b.endpoint_id = r.endpoint_id
     CROSS JOIN LATERAL (
          SELECT id FROM {schema}.deliveries
           WHERE PENDING AND endpoint_id = r.endpoint_id AND visible_at <= now()
           ORDER BY visible_at
           LIMIT least((SELECT k FROM share), b.n)
             FOR UPDATE SKIP LOCKED) p
     WHERE r.oldest <= now() AND b.n > 0),
fresh (id, endpoint_id, key, n) AS (
    (SELECT id, endpoint_id, key, 1 FROM {schema}.deliveries
      WHERE state = 'fresh' ORDER BY id LIMIT 1)
  UNION ALL
    SELECT nxt.id, nxt.endpoint_id, nxt.key, f.n + 1
      FROM fresh f
     CROSS JOIN LATERAL (
          SELECT id, endpoint_id, key FROM {schema}.deliveries
           WHERE state = 'fresh' AND id > f.id ORDER BY id LIMIT 1) nxt
     WHERE f.n < greatest(4 * %(limit)s, 100)),
placed AS MATERIALIZED (
    SELECT {schema}.ordered_place(f.endpoint_id, f.key, f.ids) AS promoted
      FROM (SELECT endpoint_id, key, array_agg(id ORDER BY id) AS ids FROM fresh
             GROUP BY endpoint_id, key) f
     ORDER BY LOCK_ORDER_F),
fill AS MATERIALIZED (
    SELECT d.id, d.endpoint_id FROM {schema}.deliveries d
     WHERE d.id = ANY (ARRAY(
          SELECT c.id
            FROM (SELECT c.id, c.visible_at, b.n - COALESCE(t.n, 0) AS room,
                         row_number() OVER (PARTITION BY c.endpoint_id
                                            ORDER BY c.visible_at) AS rn
                    FROM cand c
                    JOIN budget b ON b.endpoint_id = c.endpoint_id
                    LEFT JOIN (SELECT endpoint_id, count(*) AS n FROM picked
                                GROUP BY endpoint_id) t ON t.endpoint_id = c.endpoint_id
                   WHERE c.id <> ALL (ARRAY(SELECT id FROM picked))) c
           WHERE c.rn <= c.room
           ORDER BY c.visible_at
           LIMIT greatest(%(limit)s - (SELECT count(*) FROM picked), 0)))
       AND d.state = 'pending' AND d.visible_at <= now()
       FOR UPDATE SKIP LOCKED),
took AS (
    UPDATE {schema}.endpoint_flow f
       SET tokens = b.tokens - COALESCE(t.n, 0), refilled_at = greatest(now(), f.refilled_at)
      FROM budget b
      LEFT JOIN (SELECT endpoint_id, count(*) AS n
                   FROM (SELECT endpoint_id FROM picked UNION ALL
                         SELECT endpoint_id FROM fill) x
                  GROUP BY endpoint_id) t ON t.endpoint_id = b.endpoint_id
     WHERE f.endpoint_id = b.endpoint_id AND b.metered AND b.tokens IS NOT NULL),
claimed AS (
    UPDATE {schema}.deliveries d
       SET visible_at = now() + make_interval(secs => %(lease)s),
           attempts = d.attempts + 1,
           lease_token = %(token)s
     WHERE d.id = ANY (ARRAY(SELECT id FROM picked UNION ALL SELECT id FROM fill))
       AND (SELECT after IS NOT NULL FROM share) AND (SELECT count(*) FROM placed) >= 0
    RETURNING d.id, d.event_id, d.endpoint_id, d.attempts, d.lease_token)
SELECT c.id AS delivery_id, c.attempts AS attempt, c.lease_token AS token, c.event_id,
       ev.type AS event_type, ev.payload::text AS payload, ev.created_at AS emitted_at,
       ep.id AS endpoint_id, ep.url, ep.enabled, ep.secret,
       CASE WHEN ep.previous_secret_expires_at > now() THEN ep.previous_secret END
           AS previous_secret,
       ep.headers, ep.max_attempts, ep.retry_base_seconds, ep.retry_cap_seconds,
       ep.timeout_seconds, ep.max_in_flight, ev.traceparent, ep.url_credentials AS credentials
  FROM claimed c
  CROSS JOIN LATERAL (SELECT * FROM {schema}.events e
                       WHERE e.id = c.event_id LIMIT 1) ev
  CROSS JOIN LATERAL (SELECT * FROM {schema}.endpoints p
                       WHERE p.id = c.endpoint_id LIMIT 1) ep
""").replace("PENDING", _PENDING).replace("LAST_UUID", _LAST_UUID).replace(
    "LOCK_ORDER_F", core.ORDERED_LOCK_ORDER.format(ep="f.endpoint_id", key="f.key"))

# Every batch of the worker's statements runs in a transaction of its own at READ
# COMMITTED whatever the server's, database's or role's default (the claim and the
# completion of ordered endpoints depend on it: migrations/0005_ordered.sql), with nothing
# set on the session (outbox.delivery.connections).
BEGIN_READ_COMMITTED = "BEGIN ISOLATION LEVEL READ COMMITTED"
COMMIT = "COMMIT"
CLAIM_POSITION_SET = "SELECT set_config('outbox.claim_after', %s, true)"
CLAIM_POSITION_GET = "SELECT current_setting('outbox.claim_after', true)"

# Operational events of a completion (outbox._db.queries.opevents; the types and their
# payloads: docs/guides/operational-events.md), CTEs of COMPLETE over its r and upd:
# - recorded: the batch's recorded (not fenced, not handed back) attempts, each failure
#   with its event (a primary-key lookup: the cost follows the failures, not the batch);
#   failed: those that were not delivered, with their endpoint's tenant. Attempts of
#   operational events are no failures, so the delivery of an operational event never
#   causes one (no loops). Read from upd's RETURNING, never joined back to r (the planner
#   sees one row in a CTE: a join of two CTEs is a nested loop, quadratic in the batch).
# - tally: per endpoint of the batch, the failed attempts after its last delivered one (in
#   completion order) and that last delivered one's position (NULL: none in the batch).
# - locked: the endpoints whose health may change (a failure now, a streak or a failing
#   state to reset, a 410), locked in id order (two completions never wait for each other
#   crosswise) and read at their latest committed state (FOR UPDATE under READ COMMITTED),
#   so concurrent workers count one streak and emit one transition. A healthy endpoint's
#   deliveries lock nothing.
# - health / ep_upd: the new streak; failing_since set when the streak reaches
#   %(failing_after)s (outbox.endpoint.failing), cleared by a delivered attempt
#   (outbox.endpoint.recovered); a 410 disables the endpoint (outbox.endpoint.disabled,
#   unless only operational events got the 410).
# - op_src: outbox.delivery.dead per dead delivery, outbox.key.blocked per dead head of
#   an ordered key (with the deliveries queued behind it, counted through
#   deliveries_queued_by_key), and the transitions above; op_ins/op_fan write and route them.
OPERATIONAL = """
recorded AS MATERIALIZED (
    SELECT u.*, ev.type AS event_type, ev.tenant AS event_tenant,
           u.state <> 'delivered'
               AND NOT starts_with(ev.type, '""" + core.OP_PREFIX + """') AS failure
      FROM upd u
      LEFT JOIN LATERAL (SELECT e.type, e.tenant FROM {schema}.events e
                          WHERE e.id = u.event_id AND u.state <> 'delivered' LIMIT 1) ev
        ON true
     WHERE u.refund = 0),
failed AS MATERIALIZED (
    SELECT f.*, ep.tenant AS endpoint_tenant
      FROM recorded f
     CROSS JOIN LATERAL (SELECT p.tenant FROM {schema}.endpoints p
                          WHERE p.id = f.endpoint_id LIMIT 1) ep
     WHERE f.failure),
tally AS MATERIALIZED (
    SELECT t.endpoint_id, t.last_ok,
           count(*) FILTER (WHERE t.failure AND t.ord > COALESCE(t.last_ok, 0)) AS fails,
           (array_agg(t.status ORDER BY t.ord DESC) FILTER (WHERE t.failure))[1]
               AS last_status,
           (array_agg(t.error ORDER BY t.ord DESC) FILTER (WHERE t.failure))[1]
               AS last_error,
           COALESCE(bool_or(t.failure AND t.outcome = 'gone'), false) AS gone_seen
      FROM (SELECT c.*, max(c.ord) FILTER (WHERE c.state = 'delivered')
                            OVER (PARTITION BY c.endpoint_id) AS last_ok
              FROM recorded c) t
     GROUP BY t.endpoint_id, t.last_ok),
locked AS MATERIALIZED (
    SELECT e.id, e.tenant, e.enabled, e.failure_streak, e.failing_since
      FROM {schema}.endpoints e
     WHERE e.id = ANY (ARRAY(SELECT endpoint_id FROM tally) || %(gone)s::uuid[])
       AND (e.id = ANY (%(gone)s::uuid[]) OR e.failure_streak > 0
            OR e.failing_since IS NOT NULL
            OR e.id IN (SELECT endpoint_id FROM tally WHERE fails > 0))
     ORDER BY e.id
       FOR UPDATE),
health AS MATERIALIZED (
    SELECT l.id, l.tenant, l.failing_since,
           CASE WHEN t.last_ok IS NULL THEN l.failure_streak + COALESCE(t.fails, 0)
                ELSE t.fails END AS streak,
           l.enabled AND l.id = ANY (%(gone)s::uuid[]) AS gone,
           COALESCE(t.gone_seen, false) AS gone_seen, t.last_status, t.last_error
      FROM locked l LEFT JOIN tally t ON t.endpoint_id = l.id),
ep_upd AS (
    UPDATE {schema}.endpoints e
       SET failure_streak = h.streak,
           failing_since = CASE WHEN h.streak >= %(failing_after)s
                                THEN COALESCE(h.failing_since, now()) END,
           enabled = e.enabled AND NOT h.gone,
           disabled_reason = CASE WHEN h.gone THEN 'receiver answered 410 Gone'
                                  ELSE e.disabled_reason END,
           updated_at = CASE WHEN h.gone THEN now() ELSE e.updated_at END
      FROM health h
     WHERE e.id = h.id),
op_src AS (
    SELECT 'outbox.delivery.dead' AS type, f.endpoint_tenant AS tenant,
           json_build_object('delivery_id', f.id, 'event_id', f.event_id,
                             'event_type', f.event_type, 'endpoint_id', f.endpoint_id,
                             'tenant', f.event_tenant, 'attempts', f.attempt,
                             'outcome', f.outcome, 'last_status', f.status,
                             'last_error', f.error, 'error_class', f.error_class) AS data
      FROM failed f
     WHERE f.state = 'dead'
    UNION ALL
    SELECT 'outbox.key.blocked', f.endpoint_tenant,
           json_build_object('endpoint_id', f.endpoint_id, 'tenant', f.endpoint_tenant,
                             'key', f.key, 'delivery_id', f.id, 'event_id', f.event_id,
                             'queued', q.n)
      FROM failed f
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM {schema}.deliveries w
                          WHERE w.endpoint_id = f.endpoint_id AND w.key = f.key
                            AND w.state IN ('fresh', 'waiting')) q
     WHERE f.state = 'dead' AND f.key IS NOT NULL
    UNION ALL
    SELECT 'outbox.endpoint.failing', h.tenant,
           json_build_object('endpoint_id', h.id, 'tenant', h.tenant,
                             'consecutive_failures', h.streak,
                             'threshold', %(failing_after)s::int,
                             'last_status', h.last_status, 'last_error', h.last_error)
      FROM health h
     WHERE h.failing_since IS NULL AND h.streak >= %(failing_after)s
    UNION ALL
    SELECT 'outbox.endpoint.recovered', h.tenant,
           json_build_object('endpoint_id', h.id, 'tenant', h.tenant,
                             'failing_since', to_char(h.failing_since AT TIME ZONE 'UTC',
                                                      'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
      FROM health h
     WHERE h.failing_since IS NOT NULL AND h.streak < %(failing_after)s
    UNION ALL
    SELECT 'outbox.endpoint.disabled', h.tenant,
           json_build_object('endpoint_id', h.id, 'tenant', h.tenant, 'by', 'receiver',
                             'reason', 'receiver answered 410 Gone')
      FROM health h
     WHERE h.gone AND h.gone_seen),""" + core.OP_EMIT

# Record many attempts in one statement. Fenced: a row is updated only while it still
# carries the lease token of the claim that sent it, so a late result after a re-claim
# changes nothing (its attempt is logged as 'fenced'). 410 Gone disables the endpoint.
# The operational events of the batch (OPERATIONAL, below) are written by this same
# statement: they commit with the states they report, or not at all.
COMPLETE = """
WITH r AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(tokens)s::uuid[], %(states)s::text[], %(delays)s::float8[],
        %(refunds)s::int[], %(statuses)s::int[], %(errors)s::text[], %(outcomes)s::text[],
        %(attempts)s::int[], %(durations)s::float8[], %(classes)s::text[],
        %(excerpts)s::text[]) WITH ORDINALITY
      AS r(id, token, state, delay, refund, status, error, outcome, attempt, duration,
           error_class, excerpt, ord)),
upd AS (
    UPDATE {schema}.deliveries d
       SET state = r.state,
           visible_at = CASE
               WHEN r.state <> 'pending' THEN d.visible_at
               WHEN r.delay = 'Infinity' THEN 'infinity'::timestamptz
               ELSE now() + make_interval(secs => r.delay) END,
           attempts = d.attempts - r.refund,
           lease_token = NULL,
           last_status = COALESCE(r.status, d.last_status),
           last_error = CASE WHEN r.refund = 1 THEN d.last_error ELSE r.error END,
           finished_at = CASE WHEN r.state = 'pending' THEN NULL ELSE now() END
      FROM r
     WHERE d.id = ANY (%(ids)s::bigint[])  -- by primary key, whatever the statistics say
       AND d.id = r.id AND d.lease_token = r.token
       -- (no "state = 'pending'": a token is set only by a claim of a pending row and
       -- cleared by every completion and replay, and naming the state would invite the
       -- planner to walk the whole partial due index instead of the primary key)
    RETURNING d.id, d.endpoint_id, d.key, d.state, d.event_id, r.refund, r.ord, r.status,
              r.error, r.error_class, r.outcome, r.attempt),
-- A delivered head of an ordered endpoint's key hands the key on: its key's oldest queued
-- delivery becomes 'pending', in this same transaction (ordered_next, in
-- migrations/0005_ordered.sql: under the key's advisory lock, on a snapshot taken after it,
-- so a delivery that its emitter committed while this statement ran is not missed). Keys
-- in their locks' order (ORDERED_LOCK_ORDER: keys whose hashes collide share a lock), so
-- two statements never wait for each other's keys crosswise.
-- A dead head keeps its key.
advanced AS MATERIALIZED (
    SELECT {schema}.ordered_next(a.endpoint_id, a.key) AS promoted
      FROM (SELECT DISTINCT endpoint_id, key FROM upd
             WHERE key IS NOT NULL AND state = 'delivered') a
     ORDER BY """ + core.ORDERED_LOCK_ORDER.format(ep="a.endpoint_id", key="a.key") + """),
""" + OPERATIONAL + """,
-- A promoted delivery, and an operational event's delivery, are due now: wake an idle
-- worker as emit does (outbox._db.queries.emit's wake-up: a NOTIFY only while some worker
-- is idle, else a shared lock an arming worker waits for), else a key's next delivery
-- would wait for the idle worker's fallback poll.
woken AS MATERIALIZED (
    SELECT pg_notify(""" + core.WAKE_CHANNEL + """, '')
      FROM (SELECT 1 FROM (SELECT 1 FROM advanced WHERE promoted IS NOT NULL
                            UNION ALL SELECT 1 FROM op_fan) due LIMIT 1) p
     WHERE NOT pg_try_advisory_xact_lock_shared(""" + core.WAKE_KEY + """)),
log AS (
    INSERT INTO {schema}.delivery_attempts
        (delivery_id, attempt, outcome, status_code, duration_ms, error_class, error,
         response_excerpt, worker)
    SELECT r.id, r.attempt, CASE WHEN upd.id IS NULL THEN 'fenced' ELSE r.outcome END,
           r.status, r.duration, r.error_class, r.error, r.excerpt, %(worker)s
      FROM r LEFT JOIN upd ON upd.id = r.id
     WHERE r.refund = 0)
SELECT count(*) FROM upd
 WHERE (SELECT count(*) FROM advanced) >= 0 AND (SELECT count(*) FROM woken) >= 0
"""

# Quarantine one delivery whose completion cannot be written (the batched COMPLETE failed
# on its row alone: e.g. a retry delay from an endpoint's out-of-range numbers overflowing a
# timestamp). Dead-lettered with a readable error and its attempt logged as 'poisoned', so
# an operator sees it, fixes the endpoint and replays it. Fenced like COMPLETE: only while
# the row still carries the claim's lease token. Touches nothing but this row (no computed
# time), so it cannot fail for the reason COMPLETE did.
QUARANTINE = """
WITH upd AS (
    UPDATE {schema}.deliveries d
       SET state = 'dead', lease_token = NULL, finished_at = now(),
           last_status = COALESCE(%(status)s, d.last_status), last_error = %(error)s
     WHERE d.id = %(id)s AND d.lease_token = %(token)s
    RETURNING d.id),
log AS (
    INSERT INTO {schema}.delivery_attempts
        (delivery_id, attempt, outcome, status_code, duration_ms, error_class, error, worker)
    SELECT upd.id, %(attempt)s, 'poisoned', %(status)s, %(duration)s, 'poisoned', %(error)s,
           %(worker)s
      FROM upd)
SELECT count(*) FROM upd
"""

# Is anything due now? (drain mode's exit test) Ordered endpoints: fresh rows (not yet
# placed by a claim) count, the next claim places them; so does a leased head with
# deliveries queued behind it: its completion makes the next one due (a drain must not
# stop between the two, e.g. while that completion is still being recorded). The heads
# are read through deliveries_key_head: the cost follows the ordered keys in progress.
ANY_DUE = """
SELECT EXISTS (SELECT 1 FROM {schema}.deliveries
                WHERE state = 'pending' AND visible_at <= now())
    OR EXISTS (SELECT 1 FROM {schema}.deliveries WHERE state = 'fresh')
    OR EXISTS (SELECT 1 FROM {schema}.deliveries h
                WHERE h.key IS NOT NULL AND h.state = 'pending' AND h.lease_token IS NOT NULL
                  AND EXISTS (SELECT 1 FROM {schema}.deliveries w
                               WHERE w.endpoint_id = h.endpoint_id AND w.key = h.key
                                 AND w.state IN ('fresh', 'waiting')))
"""

# Circuit breaker opened: push the endpoint's pending rows past the cooldown so that no
# worker claims them meanwhile (a leased row keeps its token: its completion still applies).
PUSH_ENDPOINT = """
UPDATE {schema}.deliveries
   SET visible_at = now() + make_interval(secs => %(seconds)s)
 WHERE endpoint_id = %(endpoint)s AND state = 'pending'
   AND visible_at < now() + make_interval(secs => %(seconds)s)
"""

# Adaptive throttling (outbox.delivery.throttle): the endpoint answered 429 or 503, or
# timed out. Cuts its allowed rate to DECREASE x the rate in force (the adaptive one while
# it applies, else the fixed limit, else %(observed)s, what this process sent in its last
# second), and restarts the linear growth -- once per congestion event, whoever reports
# it: only for an answer to a request sent (%(sent_at)s, epoch seconds) after the last
# cut, as TCP cuts once per window (the answers to requests already under way when the
# rate was cut say nothing about the new rate), and at most every 0.25 s; with
# %(pause)s > 0 (Retry-After, clamped) no claim takes its rows until then, and the bucket
# starts empty at the pause's end (no burst the moment it lifts). One row, by primary key.
THROTTLE = """
UPDATE {schema}.endpoint_flow f
   SET adaptive_rate = CASE WHEN c.cut THEN c.rate ELSE f.adaptive_rate END,
       increase_per_second = CASE WHEN c.cut THEN greatest(%(increase)s * c.rate, 0.1)
                                  ELSE f.increase_per_second END,
       decreased_at = CASE WHEN c.cut THEN now() ELSE f.decreased_at END,
       tokens = CASE WHEN %(pause)s > 0 THEN 0
                     ELSE least(f.tokens, greatest(1, 0.1 * c.rate)) END,
       refilled_at = CASE WHEN %(pause)s > 0
                          THEN greatest(f.refilled_at, now() + make_interval(secs => %(pause)s))
                          ELSE f.refilled_at END,
       paused_until = CASE WHEN %(pause)s > 0
                           THEN greatest(f.paused_until, now() + make_interval(secs => %(pause)s))
                           ELSE f.paused_until END,
       throttled_total = f.throttled_total + 1
  FROM (SELECT COALESCE(f0.decreased_at <= now() - interval '0.25 seconds'
                        AND f0.decreased_at < to_timestamp(%(sent_at)s), true) AS cut,
               greatest(1.0, %(decrease)s * COALESCE(
                   least(least(e.rate_limit, e.tenant_rate_limit),
                         CASE WHEN f0.decreased_at > now() - interval '60 seconds'
                              THEN f0.adaptive_rate + COALESCE(f0.increase_per_second, 0)
                                   * EXTRACT(EPOCH FROM now() - f0.decreased_at)::float8 END),
                   %(observed)s::float8)) AS rate
          FROM {schema}.endpoint_flow f0
          JOIN {schema}.endpoints e ON e.id = f0.endpoint_id
         WHERE f0.endpoint_id = %(endpoint)s) c
 WHERE f.endpoint_id = %(endpoint)s AND (c.cut OR %(pause)s > 0)
"""

# The outbox_endpoint_allowed_rate gauge (every backlog_interval_seconds): the allowed rate
# of each flow-controlled endpoint (a fixed limit, or throttled lately), as BUDGET computes
# it; -1 while paused. At most 200 (the metric's label cap), lowest rate first. Reads
# only flow-controlled endpoints (partial indexes of migrations/0008_flow_control.sql).
FLOW_GAUGES = """
SELECT endpoint_id, rate FROM (
    SELECT e.id AS endpoint_id,
           CASE WHEN f.paused_until > now() THEN -1
                ELSE least(least(e.rate_limit, e.tenant_rate_limit),
                           CASE WHEN f.decreased_at > now() - interval '60 seconds'
                                THEN f.adaptive_rate + COALESCE(f.increase_per_second, 0)
                                     * EXTRACT(EPOCH FROM now() - f.decreased_at)::float8
                           END) END AS rate
      FROM (SELECT id FROM {schema}.endpoints
             WHERE rate_limit IS NOT NULL OR tenant_rate_limit IS NOT NULL
            UNION
            SELECT endpoint_id FROM {schema}.endpoint_flow
             WHERE decreased_at > now() - interval '60 seconds'
            UNION
            SELECT endpoint_id FROM {schema}.endpoint_flow
             WHERE paused_until > now()) c
      JOIN {schema}.endpoints e ON e.id = c.id
      JOIN {schema}.endpoint_flow f ON f.endpoint_id = e.id) r
 WHERE rate IS NOT NULL
 ORDER BY rate
 LIMIT 200
"""

# Repair of ordered keys left with queued deliveries and no head (nothing delivers or
# promotes them: a worker older than 0005 completing a head during a rolling deploy, a
# manual UPDATE): the worker's periodic pass (retention_task.repair_loop). A skip scan over
# deliveries_queued_by_key visits up to %(keys)s distinct (endpoint, key) after the
# position (%(after_endpoint)s, %(after_key)s; NULL: from the start), one index descent
# each; for those with no head (one probe of deliveries_key_head) ordered_advance gives
# them one, under the key's lock and re-checked there, keys in lock order. Returns the
# keys visited, the last one (the next pass's position; NULL when the scan reached the
# end) and how many heads it made. Cost: bounded by %(keys)s, never the backlog.
REPAIR_HEADLESS = """
WITH RECURSIVE queued (endpoint_id, key, n) AS (
    (SELECT endpoint_id, key, 1 FROM {schema}.deliveries
      WHERE state IN ('fresh', 'waiting')
        AND (%(after_endpoint)s::uuid IS NULL
             OR (endpoint_id, key) > (%(after_endpoint)s::uuid, %(after_key)s::text))
      ORDER BY endpoint_id, key, id LIMIT 1)
  UNION ALL
    SELECT nxt.endpoint_id, nxt.key, q.n + 1
      FROM queued q
     CROSS JOIN LATERAL (
          SELECT endpoint_id, key FROM {schema}.deliveries
           WHERE state IN ('fresh', 'waiting') AND (endpoint_id, key) > (q.endpoint_id, q.key)
           ORDER BY endpoint_id, key, id LIMIT 1) nxt
     WHERE q.n < %(keys)s),
visited AS MATERIALIZED (SELECT * FROM queued),
repaired AS MATERIALIZED (
    SELECT {schema}.ordered_advance(v.endpoint_id, v.key) AS promoted
      FROM visited v
     WHERE NOT EXISTS (SELECT 1 FROM {schema}.deliveries h
                        WHERE h.endpoint_id = v.endpoint_id AND h.key = v.key
                          AND h.key IS NOT NULL AND h.state IN ('pending', 'dead'))
     ORDER BY """ + core.ORDERED_LOCK_ORDER.format(ep="v.endpoint_id", key="v.key") + """)
SELECT (SELECT count(*) FROM visited) AS visited,
       (SELECT endpoint_id FROM visited WHERE n = %(keys)s) AS last_endpoint,
       (SELECT key FROM visited WHERE n = %(keys)s) AS last_key,
       (SELECT count(promoted) FROM repaired) AS promoted
"""

# One pruner at a time per schema across all workers (session lock, released after).
PRUNE_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtext('outbox.prune'), hashtext(%s))"
PRUNE_UNLOCK = "SELECT pg_advisory_unlock(hashtext('outbox.prune'), hashtext(%s))"

# After pruning, when the server runs no autovacuum at all (autovacuum = off), the pruner
# vacuums the queue tables itself so deleted rows' space is reused (owner only; a worker
# role that does not own them gets a warning from PostgreSQL, not an error).
AUTOVACUUM_OFF = "SELECT current_setting('autovacuum') = 'off'"
VACUUM_QUEUE = "VACUUM (ANALYZE) {schema}.deliveries, {schema}.delivery_attempts, {schema}.events"

# Due backlog and the age of its oldest row, for the gauges (and KEDA's scaler query), and
# the due deliveries of the tenant that has the most (tenant-less events count as one
# tenant): counted over the oldest 10,000 due rows only, so the gauge's own cost (a
# primary-key lookup of each row's event) stays bounded however large the backlog grows;
# a tenant that dominates the head of the queue is what it is there to show.
# Ordered endpoints: keys held back by a dead head (the head is dead and still holds its
# key: replay or `outbox dead skip` releases it), and the deliveries queued behind them;
# the worker's outbox_blocked_keys / outbox_blocked_deliveries gauges (in BACKLOG). Reads
# the dead heads through the partial unique index deliveries_key_head and counts each one's
# queue through deliveries_queued_by_key: its cost follows the blocked backlog, never the
# history.
BLOCKED_BODY = """
SELECT count(*) AS keys, COALESCE(sum(q.n), 0)::bigint AS deliveries
  FROM {schema}.deliveries h
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM {schema}.deliveries w
                      WHERE w.endpoint_id = h.endpoint_id AND w.key = h.key
                        AND w.state IN ('fresh', 'waiting')) q
 WHERE h.key IS NOT NULL AND h.state = 'dead'
"""

BACKLOG = """
WITH blocked AS (""" + BLOCKED_BODY + """)
SELECT count(*) AS due,
       COALESCE(EXTRACT(EPOCH FROM now() - min(visible_at)), 0)::float8 AS oldest_seconds,
       (SELECT COALESCE(max(n), 0) FROM (
            SELECT count(*) AS n
              FROM (SELECT event_id FROM {schema}.deliveries
                     WHERE state = 'pending' AND visible_at <= now()
                     ORDER BY visible_at LIMIT 10000) head
             CROSS JOIN LATERAL (SELECT tenant FROM {schema}.events e
                                  WHERE e.id = head.event_id LIMIT 1) ev
             GROUP BY ev.tenant) per_tenant) AS largest_tenant,
       (SELECT keys FROM blocked) AS blocked_keys,
       (SELECT deliveries FROM blocked) AS blocked_deliveries
  FROM {schema}.deliveries
 WHERE state = 'pending' AND visible_at <= now()
"""

# --- `outbox demo` (outbox.delivery.demo): its own schema, recreated each run ----------
DEMO_DROP_SCHEMA = "DROP SCHEMA IF EXISTS {schema} CASCADE"
DEMO_CREATE_ORDERS = "CREATE TABLE {schema}.demo_orders (id int PRIMARY KEY, total int)"
DEMO_INSERT_ORDER = "INSERT INTO {schema}.demo_orders VALUES (%s, %s)"
DEMO_PENDING = "SELECT count(*) FROM {schema}.deliveries WHERE state = 'pending'"
DEMO_SUMMARY = """
SELECT state, count(*) AS deliveries, sum(attempts) AS attempts
  FROM {schema}.deliveries GROUP BY state ORDER BY state
"""

# --- wake-up (outbox.delivery.wakeup; the emitting side is outbox._db.queries.WAKE*) ---------
# All on the worker's own listening connection (a direct session: LISTEN and session
# advisory locks do not survive a transaction-mode pooler).
# LISTEN on the schema's channel (a DO block: LISTEN takes no parameter, and the channel
# name is computed in SQL, once, by outbox._db.queries.WAKE_CHANNEL).
WAKE_LISTEN = "DO $$ BEGIN EXECUTE format('LISTEN %I', " + core.WAKE_CHANNEL + "); END $$"
# What the server sees of this connection (outbox.delivery.session.direct: is it a
# session of our own, or does a pooler sit between?).
SESSION_PROBE = ("SELECT host(inet_client_addr()), inet_client_port(), inet_server_port(),"
                 " current_setting('port')")
# How long arming may wait for emitting transactions that skipped the NOTIFY to end.
WAKE_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, false)"
# Arm: become the schema's one idle sentinel (a try: another idle worker may be it), then
# take the wake key exclusively: it waits (up to lock_timeout) for every open emitting
# transaction that holds it shared, so the claim that follows sees their rows. From then
# on every emitting transaction NOTIFYs. True: armed; false: another worker is the
# sentinel (this one still LISTENs); SQLSTATE 55P03: an emitting transaction is still open.
WAKE_ARM = (
    "SELECT CASE WHEN pg_try_advisory_lock(hashtext('outbox.wakeup.sentinel'),"
    " hashtext('{schema}')) THEN (SELECT true FROM pg_advisory_lock(" + core.WAKE_KEY + "))"
    " ELSE false END"
)
# Disarm (busy: it will claim again by itself): emitting transactions stop NOTIFYing.
WAKE_DISARM = "SELECT pg_advisory_unlock_all()"
# Hand over: a sentinel that goes busy tells the other listeners, so an idle worker that
# lost the election to it tries again now (else nobody would be armed until its next poll,
# and emitters, seeing no sentinel, would not NOTIFY). One NOTIFY per hand-over.
WAKE_HANDOVER = "SELECT pg_notify(" + core.WAKE_CHANNEL + ", '')"
# Seconds until the earliest pending delivery comes due (a retry, a lease, a breaker's
# pause), negative if one is due now, NULL if none: one descent of deliveries_due (and
# one of deliveries_fresh: a fresh row is due now, the next claim places it).
NEXT_DUE = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM {schema}.deliveries WHERE state = 'fresh')
            THEN -1::float8
            ELSE (SELECT EXTRACT(EPOCH FROM visible_at - now())::float8
                    FROM {schema}.deliveries
                   WHERE state = 'pending' AND visible_at < 'infinity'
                   ORDER BY visible_at LIMIT 1) END
"""

# Keys held back by a dead head, and the deliveries queued behind them (BACKLOG's
# blocked_keys / blocked_deliveries; BLOCKED_BODY, above).
BLOCKED = BLOCKED_BODY

