"""Completion of claimed deliveries: attempts recorded, fenced by the claim's lease token,
with the operational events they cause written by the same statement; and the quarantine of
a row whose completion cannot be written."""

from __future__ import annotations

from outbox._db import queries as core

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

# A first-try success (attempt 1, delivered, nothing noted) is recorded on the delivery
# row the statement updates anyway (success_ms, success_worker, success_excerpt), not as a
# delivery_attempts row: one heap row, two index entries and a delete at retention fewer
# per delivery (migrations/0019_wal.sql; readers see it through delivery_attempt_log).
_FIRST_TRY = ("(r.state = 'delivered' AND r.outcome = 'delivered' AND r.attempt = 1"
             " AND r.refund = 0 AND r.error IS NULL AND r.error_class IS NULL)")

# Record many attempts in one statement. Fenced: a row is updated only while it still
# carries the lease token of the claim that sent it, so a late result after a re-claim
# changes nothing (its attempt is logged as 'fenced'). 410 Gone disables the endpoint.
# The operational events of the batch (OPERATIONAL, below) are written by this same
# statement: they commit with the states they report, or not at all. Every attempt is
# logged (delivery_attempts) except a first-try success (_FIRST_TRY): its row carries it.
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
           finished_at = CASE WHEN r.state = 'pending' THEN NULL ELSE now() END,
           success_ms = CASE WHEN """ + _FIRST_TRY + """ THEN r.duration END,
           success_worker = CASE WHEN """ + _FIRST_TRY + """ THEN %(worker)s END,
           success_excerpt = CASE WHEN """ + _FIRST_TRY + """ THEN r.excerpt END
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
     WHERE r.refund = 0 AND NOT (upd.id IS NOT NULL AND """ + _FIRST_TRY + """))
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
