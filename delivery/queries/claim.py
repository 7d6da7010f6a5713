"""The claim: one statement that leases due deliveries fairly across endpoints, within each
endpoint's budget (this process's free slots and the endpoint's send tokens), and places
fresh rows of ordered endpoints; the rotation's position goes in as a parameter and comes
back in a column."""

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
#    picked: from each visited endpoint whose oldest row is due, its oldest due rows (one
#    descent each), at most its budget (BUDGET, below: this process's free slots there
#    and the endpoint's send tokens) and at most an even share k of the claim, where k
#    is filled like water (`quota`): an endpoint whose budget is under the share takes
#    its budget, and what it leaves is split among the others; one with nothing to spend
#    (a rate limit's tokens taken, every slot of this process busy there) takes nothing.
#    So the ring never takes more than limit rows, and a limited endpoint's backlog does
#    not halve the claims of an unlimited one beside it.
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
# The rotation's position is a parameter (%(after)s: NULL at a worker's start, then the
# last value it got back) and a column of the result (CLAIM_POSITION, below): where this
# claim's ring stopped (its last visited endpoint; the position given when the ring found no
# pending row). The result always carries it: when nothing is claimed, it is one row whose
# other columns are all NULL (`share`, one row, LEFT JOINed to the claimed rows), so the
# position moves on with every claim, even one that takes nothing (a ring that visited
# only endpoints with future rows, or over their budgets). The worker carries it from one
# claim to the next (outbox.delivery.store); nothing is left on the server connection, and
# the claim is one statement in its transaction. A random start would not rotate:
# endpoint ids are UUIDv7 (time-ordered), so a random uuid falls above nearly all of them
# and every claim would begin at the oldest endpoint. A worker process rotates as one,
# from the lowest endpoint id at its start.
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
# LIMITs (PostgreSQL bug #15715); the fill's recheck of visible_at is written so that no
# index can serve it ((state = 'pending' AND visible_at <= now()) IS TRUE: a generic plan
# on stale statistics ANDed the fill's primary keys with a bitmap of every row of the
# partial index deliveries_due, 1-2 ms with 50,000 due);
# each claimed row fetches its event and endpoint by
# primary key (LATERAL ... LIMIT 1 cannot be flattened into a hash join). The result's
# outer side is `share` (one row, read by the final SELECT whatever was claimed), so the
# rotation's position is reported by every claim, even one that takes nothing.
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
# Its columns are named after Job's fields, plus CLAIM_POSITION (outbox.delivery.jobs.job_row
# matches them by name and refuses a result that is not a Job); the secrets are opened in
# Python. The two jsonb columns come back NULL when empty (the default of every endpoint
# without custom or secret headers): decoding '{}' in Python twice a row was a visible
# share of the worker's CPU; job_row gives `headers` back as {}.
# No row's data may fail the statement (it would fail the claim for everyone): the only
# arithmetic on a row's own value, attempts + 1, is capped below int4's end (an attempts
# of 2147483647 written by hand overflowed it); the endpoint numbers are bounded by CHECKs.

# The claim's per-endpoint budgets (its `budget` CTE): for each endpoint the claim may take
# rows of (the ring's due endpoints and the fill's candidates), how many it may take:
#   slots:  this process's free in-flight slots there, its cap (max_in_flight, else
#           %(default_cap)s) minus what it has in flight (%(used_ids)s / %(used_counts)s,
#           sorted by id: found by binary search, width_bucket; an endpoint whose breaker
#           is open here is passed with a huge count: 0 slots). Joined as a table, the
#           unnest of the two arrays was estimated at 10 rows on the generic plan (an
#           array parameter's length is unknown there) and probed by a nested loop: with
#           1,000 endpoints in flight, 40-60 ms a claim, 80% of its time (bench.flow slow);
#   tokens: when the endpoint is flow-controlled (a fixed rate limit, an adaptive rate in
#           force, a Retry-After pause: migrations/0008_flow_control.sql), the whole
#           endpoint's send budget across every process: its endpoint_flow row, locked
#           FOR UPDATE SKIP LOCKED (a row another claim holds gives 0 this time), refilled
#           at the rate since refilled_at up to the burst; `took` writes back what is left.
# So a process never claims rows it cannot start at once, and rows beyond the budget stay
# in the database (no claim, no hand-back write). Each endpoint costs two primary-key
# probes of endpoints and endpoint_flow (a third, the lock, when controlled).
# A fixed limit's tokens are spent a tenth of a second's worth at a time (at least 1, at
# most half the burst: tokens stop at the burst, so a chunk as large as the burst could
# only be taken at the moment the bucket fills): a claim takes none of the endpoint's
# rows until that many have accumulated. Taken one at a time (each claim taking the one
# token refilled since the last), the sends of a 50/s endpoint came one by one, each its
# own wake-up, claim and completion flush: an unlimited endpoint beside it made 30% more
# claims and 40% more flushes, and ran at 0.8x its rate alone (bench.flow limit50,
# limitcost). Not while an adaptive rate applies: its burst is already that tenth, and
# sending it whole drew 429s in clusters from a receiver at its limit (bench.flow
# gateway: 68/s after 10 s with 1.1% of 429s, against 74.0-75.4/s with 0.2-0.3% one
# token at a time).
# The adaptive rate (AIMD) grows linearly from the last decrease and stops applying 60 s
# after it; a fixed limit is its ceiling. While it applies the burst is 0.1 s of it (at
# least 1): a throttled endpoint gets an even flow, not a second's worth at once (a
# receiver counting a sliding second would see rate + burst and answer 429 again).
BUDGET = """
    SELECT e.endpoint_id, s.metered,
           greatest(0, least(COALESCE(ep.max_in_flight, %(default_cap)s) - u.n,
                             CASE WHEN NOT s.controlled THEN 2147483647
                                  WHEN fl.endpoint_id IS NULL
                                       OR fl.paused_until > now() THEN 0
                                  WHEN r.rate IS NULL THEN 2147483647
                                  WHEN r.tokens < rb.chunk THEN 0
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
          SELECT """ + core.adaptive_rate("fl") + """ AS adaptive) a
     CROSS JOIN LATERAL (
          SELECT least(ep.fixed, a.adaptive) AS rate,
                 greatest(1, CASE WHEN a.adaptive IS NULL THEN COALESCE(ep.rate_burst, ep.fixed)
                                  ELSE 0.1 * least(ep.fixed, a.adaptive) END) AS burst,
                 CASE WHEN a.adaptive IS NULL
                      THEN greatest(1, least(0.5 * COALESCE(ep.rate_burst, ep.fixed),
                                             0.1 * ep.fixed)) ELSE 1 END AS chunk) rb
     CROSS JOIN LATERAL (
          SELECT rb.rate,
                 least(rb.burst, fl.tokens + rb.rate * greatest(0, EXTRACT(
                     EPOCH FROM now() - fl.refilled_at)::float8)) AS tokens) r
     CROSS JOIN LATERAL (
          SELECT width_bucket(e.endpoint_id, %(used_ids)s::uuid[]) AS i) w
     CROSS JOIN LATERAL (
          SELECT CASE WHEN w.i > 0 AND (%(used_ids)s::uuid[])[w.i] = e.endpoint_id
                      THEN (%(used_counts)s::int[])[w.i] ELSE 0 END AS n) u
"""

# deliveries_pending_by_endpoint's predicate, and the floor (below)
_PENDING = "state = 'pending' AND visible_at < 'infinity' AND id >= %(floor)s::bigint"
# The floor (%(floor)s: the worker passes {schema}.claim_floor(), re-read every second;
# migrations/0018_partitioned_history.sql): deliveries is partitioned by id, and every
# partition below the floor holds no pending, fresh or waiting row, so `id >= floor` on every
# read of deliveries lets PostgreSQL leave those partitions out: out of a custom plan, or
# out of a generic plan's execution (pruned when the executor starts; GENERIC_PLAN, below):
# the claim's index probes follow the partitions with queued work (about two), not every
# partition kept. Its price: the ring's steps read one heap row each (the id), where they
# were index-only. The lowest bigint: no floor.
# The result column that carries the rotation's position (text; see above).
CLAIM_POSITION = "claim_after"
_LAST_UUID = "'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid"
_LOCK_ORDER_F = core.ORDERED_LOCK_ORDER.format(ep="f.endpoint_id", key="f.key")
CLAIM = """
WITH RECURSIVE ring (endpoint_id, oldest, n, due, wrapped, after) AS (
    (SELECT head.endpoint_id, head.visible_at, 1, (head.visible_at <= now())::int,
            head.wrapped, cur.after
       FROM (SELECT %(after)s::uuid AS after) cur
      CROSS JOIN LATERAL (
          (SELECT endpoint_id, visible_at, false AS wrapped FROM {schema}.deliveries
            WHERE """ + _PENDING + """ AND endpoint_id > cur.after
            ORDER BY endpoint_id, visible_at LIMIT 1)
          UNION ALL
          (SELECT endpoint_id, visible_at, true FROM {schema}.deliveries
            WHERE """ + _PENDING + """
            ORDER BY endpoint_id, visible_at LIMIT 1)
          LIMIT 1) head)
  UNION ALL
    SELECT nxt.endpoint_id, nxt.visible_at, r.n + 1, r.due + (nxt.visible_at <= now())::int,
           nxt.wrapped, r.after
      FROM ring r
     CROSS JOIN LATERAL (
          (SELECT endpoint_id, visible_at, r.wrapped AS wrapped FROM {schema}.deliveries
            WHERE """ + _PENDING + """ AND endpoint_id > r.endpoint_id
              AND endpoint_id <= CASE WHEN r.wrapped
                                      THEN COALESCE(r.after, """ + _LAST_UUID + """)
                                      ELSE """ + _LAST_UUID + """ END
            ORDER BY endpoint_id, visible_at LIMIT 1)
          UNION ALL
          (SELECT endpoint_id, visible_at, true FROM {schema}.deliveries
            WHERE NOT r.wrapped AND """ + _PENDING + """ AND endpoint_id <= r.after
            ORDER BY endpoint_id, visible_at LIMIT 1)
          LIMIT 1) nxt
     WHERE r.due < %(limit)s AND r.n < greatest(4 * %(limit)s, 100)),
share AS MATERIALIZED (
    SELECT COALESCE((array_agg(endpoint_id ORDER BY n DESC))[1], %(after)s::uuid) AS after
      FROM ring),
cand AS MATERIALIZED (
    SELECT id, endpoint_id, visible_at FROM {schema}.deliveries
     WHERE state = 'pending' AND visible_at <= now() AND id >= %(floor)s::bigint
     ORDER BY visible_at
     LIMIT 2 * %(limit)s),
budget AS MATERIALIZED (""" + BUDGET + """),
quota AS MATERIALIZED (
    -- budgets ascending: the first budget over its even share of what the smaller ones
    -- left sets the level k (those before it take their whole budgets, each at most k);
    -- none is over: every budget fits (k = limit). At most limit rows in all.
    SELECT COALESCE((array_agg(w.share ORDER BY w.rn)
                         FILTER (WHERE w.n > w.share))[1], %(limit)s) AS k
      FROM (SELECT b.n, row_number() OVER (ORDER BY b.n, b.endpoint_id) AS rn,
                   (%(limit)s - COALESCE(sum(b.n) OVER (ORDER BY b.n, b.endpoint_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))
                   / (count(*) OVER () - row_number() OVER (ORDER BY b.n, b.endpoint_id)
                      + 1) AS share
              FROM ring r JOIN budget b ON b.endpoint_id = r.endpoint_id
             WHERE r.oldest <= now() AND b.n > 0) w),
picked AS MATERIALIZED (
    SELECT p.id, r.endpoint_id
      FROM ring r
      JOIN budget b ON b.endpoint_id = r.endpoint_id
     CROSS JOIN LATERAL (
          SELECT id FROM {schema}.deliveries
           WHERE """ + _PENDING + """
             AND endpoint_id = r.endpoint_id AND visible_at <= now()
           ORDER BY visible_at
           LIMIT least((SELECT k FROM quota), b.n)
             FOR UPDATE SKIP LOCKED) p
     WHERE r.oldest <= now() AND b.n > 0),
fresh (id, endpoint_id, key, n) AS (
    (SELECT id, endpoint_id, key, 1 FROM {schema}.deliveries
      WHERE state = 'fresh' AND id >= %(floor)s::bigint ORDER BY id LIMIT 1)
  UNION ALL
    SELECT nxt.id, nxt.endpoint_id, nxt.key, f.n + 1
      FROM fresh f
     CROSS JOIN LATERAL (
          SELECT id, endpoint_id, key FROM {schema}.deliveries
           WHERE state = 'fresh' AND id > f.id AND id >= %(floor)s::bigint
           ORDER BY id LIMIT 1) nxt
     WHERE f.n < greatest(4 * %(limit)s, 100)),
placed AS MATERIALIZED (
    SELECT {schema}.ordered_place(f.endpoint_id, f.key, f.ids) AS promoted
      FROM (SELECT endpoint_id, key, array_agg(id ORDER BY id) AS ids FROM fresh
             GROUP BY endpoint_id, key) f
     ORDER BY """ + _LOCK_ORDER_F + """),
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
       AND (d.state = 'pending' AND d.visible_at <= now()) IS TRUE
       AND d.id >= %(floor)s::bigint
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
           attempts = least(d.attempts, 2147483646) + 1,
           lease_token = %(token)s
     WHERE d.id = ANY (ARRAY(SELECT id FROM picked UNION ALL SELECT id FROM fill))
       AND d.id >= %(floor)s::bigint
       AND (SELECT count(*) FROM placed) >= 0
    RETURNING d.id, d.event_id, d.endpoint_id, d.attempts, d.lease_token)
SELECT c.id AS delivery_id, c.attempts AS attempt, c.lease_token AS token, c.event_id,
       ev.type AS event_type, ev.payload::text AS payload, ev.created_at AS emitted_at,
       ep.id AS endpoint_id, ep.url, ep.enabled, ep.secret,
       CASE WHEN ep.previous_secret_expires_at > now() THEN ep.previous_secret END
           AS previous_secret,
       NULLIF(ep.headers, '{{}}'::jsonb) AS headers, ep.max_attempts, ep.retry_base_seconds,
       ep.retry_cap_seconds, ep.timeout_seconds, ep.max_in_flight, ev.traceparent,
       ep.url_credentials AS credentials,
       NULLIF(ep.secret_header_values, '{{}}'::jsonb) AS secret_headers, ep.auth_kind,
       ep.auth_secret,
       ep.tls_client_cert, ep.tls_client_key,
       ep.oauth2_token_url, ep.oauth2_client_id, ep.oauth2_client_secret, ep.oauth2_scope,
       s.after::text AS """ + CLAIM_POSITION + """
  FROM share s
  LEFT JOIN (claimed c
             CROSS JOIN LATERAL (SELECT * FROM {schema}.events e
                                  WHERE e.id = c.event_id LIMIT 1) ev
             CROSS JOIN LATERAL (SELECT * FROM {schema}.endpoints p
                                  WHERE p.id = c.endpoint_id LIMIT 1) ep) ON true
"""

# The claim's floor (%(floor)s of CLAIM, above) and the partitions of deliveries and events
# (a catalog count: every role may read it), read in the claim's transaction once a second.
CLAIM_FLOOR = """
SELECT {schema}.claim_floor(),
       (SELECT count(*) FROM pg_catalog.pg_inherits
         WHERE inhparent IN ('{schema}.deliveries'::regclass, '{schema}.events'::regclass))
"""

# The claim's plan. PostgreSQL's plan cache chose a custom plan for every claim (its generic
# plan's estimate is the higher), and planning this statement takes 2.4-3.4 ms, twice its
# execution: a third of the database's CPU per delivery on a hot endpoint (perf). A
# generic plan is made once per prepared statement and connection (and again after a
# change of schema or statistics: a partition made or dropped, an ANALYZE) and costs
# 0.1-0.2 ms a claim to take up; the floor then prunes partitions when the executor
# starts, not in the planner. Its price grows with the partitions it covers (EXPLAIN
# EXECUTE of a prepared claim, 2026-11-26): made in 10 ms with 12 partitions of deliveries
# and events in all (about the defaults'), 37 ms with 36, 85 ms with 63 of deliveries
# alone, 341 ms with 200. So
# the worker asks for it (SET LOCAL, this transaction only: nothing is left on the session)
# only while deliveries and events have at most GENERIC_PLAN_MAX_PARTITIONS partitions in
# all, and on prepared statements (not with OUTBOX_PREPARE_THRESHOLD=none, where a generic
# plan would be made anew for each claim), and leaves the choice to PostgreSQL otherwise.
# Measured (one connection, claims of 20, three partitions): 1.33 ms a claim against 4.47.
GENERIC_PLAN = "SET LOCAL plan_cache_mode = force_generic_plan"
