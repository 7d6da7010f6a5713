"""Periodic work of the worker: repair of headless ordered keys, the pruner's lock and
vacuum, and the backlog gauges."""

from __future__ import annotations

from outbox._db import queries as core

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

# Keys held back by a dead head, and the deliveries queued behind them (BACKLOG's
# blocked_keys / blocked_deliveries; BLOCKED_BODY, above).
BLOCKED = BLOCKED_BODY
