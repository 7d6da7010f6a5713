"""Flow control written outside the claim: a circuit breaker's push, adaptive throttling
(429/503/timeouts, Retry-After) and the allowed-rate gauge. The claim's budgets: claim.BUDGET."""

from __future__ import annotations

from outbox._db import queries as core

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
# second), and restarts its growth (outbox._db.queries.adaptive_rate: linear after a cut
# from a rate in force; %(slow_start)s times a second after one from %(observed)s, one
# process's share, until the next cut) -- once per congestion event, whoever reports
# it: only for an answer to a request admitted (claimed by a claim that began at
# %(admitted_at)s, epoch seconds) after the last cut, as TCP cuts once per window (the
# answers to requests claimed under the old rate say nothing about the new one), and at
# most once a second (receivers limit per sliding second or longer, and remember what
# they refused: a cut shows at the receiver only once its window has passed; measured:
# cuts every 0.25 s collapsed the rate to its floor after one initial burst, whose 429s
# went on for a second); with
# %(pause)s > 0 (Retry-After, clamped) no claim takes its rows until then, and the bucket
# starts empty at the pause's end (no burst the moment it lifts). One row, by primary key.
THROTTLE = """
UPDATE {schema}.endpoint_flow f
   SET adaptive_rate = CASE WHEN c.cut THEN c.rate ELSE f.adaptive_rate END,
       increase_per_second = CASE WHEN c.cut THEN greatest(%(increase)s * c.rate, 1.0)
                                  ELSE f.increase_per_second END,
       growth = CASE WHEN NOT c.cut THEN f.growth WHEN c.known THEN NULL
                     ELSE %(slow_start)s END,
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
  FROM (SELECT COALESCE(f0.decreased_at <= now() - interval '1 second'
                        AND f0.decreased_at < to_timestamp(%(admitted_at)s), true) AS cut,
               k.rate IS NOT NULL AS known,
               greatest(1.0, %(decrease)s * COALESCE(k.rate, %(observed)s::float8)) AS rate
          FROM {schema}.endpoint_flow f0
          JOIN {schema}.endpoints e ON e.id = f0.endpoint_id
         CROSS JOIN LATERAL (
              SELECT least(least(e.rate_limit, e.tenant_rate_limit),
                           """ + core.adaptive_rate("f0") + """) AS rate) k
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
                           """ + core.adaptive_rate("f") + """) END AS rate
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
