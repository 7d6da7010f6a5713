"""SQL of the web console's own reads (:mod:`outbox.admin.activity`)."""

from __future__ import annotations

# Per minute of the last hour (60 rows, oldest first): deliveries delivered and dead in
# that minute, and the backlog (rows pending) at the minute's end. The backlog is rebuilt
# from the rows themselves: a row counts from its creation (or the window's start) until
# it finished, so only rows pending now (the deliveries_due index) and rows finished in
# the window (the deliveries_finished index) are read, each once, grouped at once by
# (minute born, minute finished): the cost follows the backlog plus one hour of
# throughput, never the history. A replayed row counts from its creation. The window's
# start is spelt out in the finished rows' condition (not win.start) so that the planner
# sees its value and picks the index rather than a scan.
CONSOLE_LAST_HOUR = """
WITH win AS (
  SELECT date_trunc('minute', now()) - interval '59 minutes' AS start
), finished AS (
  SELECT greatest(date_trunc('minute', d.created_at), win.start) AS born,
         date_trunc('minute', d.finished_at) AS ended,
         count(*) AS n,
         count(*) FILTER (WHERE d.state = 'delivered') AS delivered,
         count(*) FILTER (WHERE d.state = 'dead') AS dead
    FROM {schema}.deliveries d, win
   WHERE d.state <> 'pending'
     AND d.finished_at >= date_trunc('minute', now()) - interval '59 minutes'
   GROUP BY 1, 2
), pending AS (
  SELECT greatest(date_trunc('minute', d.created_at), win.start) AS born, count(*) AS n
    FROM {schema}.deliveries d, win
   WHERE d.state = 'pending'
   GROUP BY 1
), changes AS (
  SELECT born AS minute, n AS delta, 0 AS delivered, 0 AS dead FROM pending
  UNION ALL
  SELECT born, n, 0, 0 FROM finished
  UNION ALL
  SELECT ended, -n, delivered, dead FROM finished
), per_minute AS (
  SELECT minute, sum(delta) AS delta, sum(delivered) AS delivered, sum(dead) AS dead
    FROM changes GROUP BY minute
)
SELECT s.minute,
       COALESCE(p.delivered, 0)::bigint AS delivered,
       COALESCE(p.dead, 0)::bigint AS dead,
       (sum(COALESCE(p.delta, 0)) OVER (ORDER BY s.minute))::bigint AS backlog
  FROM win
 CROSS JOIN generate_series(win.start, win.start + interval '59 minutes',
                            interval '1 minute') AS s(minute)
  LEFT JOIN per_minute p ON p.minute = s.minute
 ORDER BY s.minute
"""
