-- outbox 0002: indexes for dead-letter inspection and replay (outbox dead / outbox replay).
--
-- Both are partial: only dead rows are in them, so their size follows the dead-letter
-- backlog, not the history, and a row enters them once, when it dies (state and
-- finished_at are already indexed, so HOT updates are not affected). Without them,
-- `outbox dead list` with a selective filter (or when nothing is dead) walks every
-- finished row of deliveries_finished, and each `outbox replay` batch walks the primary
-- key between dead rows or re-reads every dead row. Measured on 6.1M deliveries with
-- 100,000 dead (README, Operations): `dead list --event-type T` 28-29 s -> 1.3-1.5 s,
-- `dead list` with nothing dead 27.7 s -> 1.7 s, `replay --all` 10.5-11 s -> 9-9.5 s
-- (wall times of the whole command, ~0.6 s of it Python start-up).
--
-- Building an index on a large existing `deliveries` table blocks writes to it (emits)
-- for the duration of one table scan, inside the migration's transaction. On a big,
-- busy table create them beforehand without blocking, then migrate (IF NOT EXISTS
-- makes this file a no-op for them):
--   CREATE INDEX CONCURRENTLY deliveries_dead_by_id ON <schema>.deliveries (id)
--       WHERE state = 'dead';
--   CREATE INDEX CONCURRENTLY deliveries_dead_by_time ON <schema>.deliveries (finished_at)
--       WHERE state = 'dead';

-- Replay: keyset pagination by id over the dead rows.
CREATE INDEX IF NOT EXISTS deliveries_dead_by_id ON deliveries (id) WHERE state = 'dead';
-- Listing: most recently dead first, and --since/--until, across endpoints.
CREATE INDEX IF NOT EXISTS deliveries_dead_by_time ON deliveries (finished_at)
    WHERE state = 'dead';
