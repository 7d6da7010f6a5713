"""Every SQL statement of the ``delivery`` package. ``{schema}`` is the quoted schema."""

from __future__ import annotations

# Claim up to %(limit)s due deliveries and lease them: visible_at moves to now() + lease,
# so a crashed worker's rows come back once the lease expires (no reaper, no heartbeat).
# MATERIALIZED keeps the planner from locking more rows than the LIMIT (bug #15715).
# The plan shape is pinned, not left to statistics (stale when autovacuum lags or is off):
# the UPDATE finds its rows by primary key (= ANY of the claimed ids), and each claimed row
# fetches its event and endpoint by primary key (LATERAL ... LIMIT 1 cannot be flattened
# into a hash join), so the cost stays proportional to the claim, never to the tables.
# Its columns are named after Job's fields (outbox.delivery.store.job_row matches them by
# name and refuses a result that is not a Job); the secrets are opened in Python.
CLAIM = """
WITH due AS MATERIALIZED (
    SELECT id FROM {schema}.deliveries
     WHERE state = 'pending' AND visible_at <= now()
     ORDER BY visible_at
     LIMIT %(limit)s
     FOR UPDATE SKIP LOCKED),
claimed AS (
    UPDATE {schema}.deliveries d
       SET visible_at = now() + make_interval(secs => %(lease)s),
           attempts = d.attempts + 1,
           lease_token = %(token)s
     WHERE d.id = ANY (ARRAY(SELECT id FROM due))
    RETURNING d.id, d.event_id, d.endpoint_id, d.attempts, d.lease_token)
SELECT c.id AS delivery_id, c.attempts AS attempt, c.lease_token AS token, c.event_id,
       ev.type AS event_type, ev.payload::text AS payload, ev.created_at AS emitted_at,
       ep.id AS endpoint_id, ep.url, ep.enabled, ep.secret,
       CASE WHEN ep.previous_secret_expires_at > now() THEN ep.previous_secret END
           AS previous_secret,
       ep.headers, ep.max_attempts, ep.retry_base_seconds, ep.retry_cap_seconds,
       ep.timeout_seconds, ep.max_in_flight, ev.traceparent
  FROM claimed c
  CROSS JOIN LATERAL (SELECT * FROM {schema}.events e
                       WHERE e.id = c.event_id LIMIT 1) ev
  CROSS JOIN LATERAL (SELECT * FROM {schema}.endpoints p
                       WHERE p.id = c.endpoint_id LIMIT 1) ep
"""

# Record many attempts in one statement. Fenced: a row is updated only while it still
# carries the lease token of the claim that sent it, so a late result after a re-claim
# changes nothing (its attempt is logged as 'fenced'). 410 Gone disables the endpoint.
COMPLETE = """
WITH r AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(tokens)s::uuid[], %(states)s::text[], %(delays)s::float8[],
        %(refunds)s::int[], %(statuses)s::int[], %(errors)s::text[], %(outcomes)s::text[],
        %(attempts)s::int[], %(durations)s::float8[], %(classes)s::text[],
        %(excerpts)s::text[])
      AS r(id, token, state, delay, refund, status, error, outcome, attempt, duration,
           error_class, excerpt)),
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
    RETURNING d.id),
gone AS (
    UPDATE {schema}.endpoints
       SET enabled = false, disabled_reason = 'receiver answered 410 Gone', updated_at = now()
     WHERE id = ANY (%(gone)s::uuid[]) AND enabled),
log AS (
    INSERT INTO {schema}.delivery_attempts
        (delivery_id, attempt, outcome, status_code, duration_ms, error_class, error,
         response_excerpt, worker)
    SELECT r.id, r.attempt, CASE WHEN upd.id IS NULL THEN 'fenced' ELSE r.outcome END,
           r.status, r.duration, r.error_class, r.error, r.excerpt, %(worker)s
      FROM r LEFT JOIN upd ON upd.id = r.id
     WHERE r.refund = 0)
SELECT count(*) FROM upd
"""

# Is anything due now? (drain mode's exit test)
ANY_DUE = """
SELECT EXISTS (SELECT 1 FROM {schema}.deliveries
                WHERE state = 'pending' AND visible_at <= now())
"""

# Circuit breaker opened: push the endpoint's pending rows past the cooldown so that no
# worker claims them meanwhile (a leased row keeps its token: its completion still applies).
PUSH_ENDPOINT = """
UPDATE {schema}.deliveries
   SET visible_at = now() + make_interval(secs => %(seconds)s)
 WHERE endpoint_id = %(endpoint)s AND state = 'pending'
   AND visible_at < now() + make_interval(secs => %(seconds)s)
"""

# One pruner at a time per schema across all workers (session lock, released after).
PRUNE_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtext('outbox.prune'), hashtext(%s))"
PRUNE_UNLOCK = "SELECT pg_advisory_unlock(hashtext('outbox.prune'), hashtext(%s))"

# After pruning, when the server runs no autovacuum at all (autovacuum = off), the pruner
# vacuums the queue tables itself so deleted rows' space is reused (owner only; a worker
# role that does not own them gets a warning from PostgreSQL, not an error).
AUTOVACUUM_OFF = "SELECT current_setting('autovacuum') = 'off'"
VACUUM_QUEUE = "VACUUM (ANALYZE) {schema}.deliveries, {schema}.delivery_attempts, {schema}.events"

# Due backlog and the age of its oldest row, for the gauges (and KEDA's scaler query).
BACKLOG = """
SELECT count(*) AS due,
       COALESCE(EXTRACT(EPOCH FROM now() - min(visible_at)), 0)::float8 AS oldest_seconds
  FROM {schema}.deliveries
 WHERE state = 'pending' AND visible_at <= now()
"""
