"""SQL of the partition manager (outbox.admin.partitions): calls of the functions of
migrations/0018_partitioned_history.sql, which hold the logic (the design is there)."""

from __future__ import annotations

# The retention's cutoffs from the database clock: finished rows (and closed partitions)
# before the first may go; dead rows that died before the second (NULL: none).
PARTITION_CUTOFFS = """
SELECT now() - make_interval(secs => %(retention)s) AS cutoff,
       CASE WHEN %(dead)s::float8 IS NOT NULL
            THEN now() - make_interval(secs => %(dead)s::float8) END AS dead_cutoff
"""
# The partition manager's transactions hold ACCESS EXCLUSIVE on events (and deliveries) for
# their catalog work until commit: their commit must not wait for a synchronous standby, or a
# missing one keeps that lock, and every emit behind it, until it returns. Safe: a catalog
# change lost with the primary is made (or dropped) again by the next pass, and any later
# commit that waits for the standby carries it there first (WAL is one sequence).
LOCAL_COMMIT = "SET LOCAL synchronous_commit = local"
# Opens the next partition when the open one is %(width)s seconds old, keeps %(ahead)s
# created past it; returns how many it created.
PARTITIONS_ADVANCE = "SELECT {schema}.partitions_advance(%(width)s, %(ahead)s)"
# Every partition, oldest first, with what blocks its drop (NULL: droppable).
PARTITION_STATUS = """
SELECT k, deliveries, attempts, lo, hi, opened_at, closed_at, rows_estimate, bytes,
       blocked_by
  FROM {schema}.partition_status(%(cutoff)s, %(dead_cutoff)s)
 ORDER BY k
"""
# Drops one partition of both tables if nothing blocks it (re-checked under lock).
PARTITION_DROP = """
SELECT {schema}.partition_drop(%(k)s, %(cutoff)s, %(dead_cutoff)s, %(lock_timeout_ms)s)
"""

# The partitions of events (migrations/0025_partitioned_events.sql), oldest first, with
# what blocks each drop (NULL: droppable).
EVENT_PARTITION_STATUS = """
SELECT name, lo, hi, rows_estimate, bytes, blocked_by
  FROM {schema}.event_partition_status(%(cutoff)s)
 ORDER BY hi
"""
# Drops one partition of events, with its idempotency keys, if nothing blocks it.
EVENT_PARTITION_DROP = """
SELECT {schema}.event_partition_drop(%(name)s, %(cutoff)s, %(lock_timeout_ms)s)
"""
