-- outbox 0006: indexes for the event log of the HTTP API, the console and the portal
-- (outbox/queries/events.py): list events by type, or by tenant, newest first, keyset-
-- paginated on the UUIDv7 id; and page dead letters on (finished_at, id). Without them a
-- filter on a rare type or a small tenant walks the primary key backwards over the whole
-- history before it fills a page.
--
-- Locks and cost. `outbox migrate` applies every pending migration in ONE transaction, so
-- CREATE INDEX CONCURRENTLY cannot run here, and each lock below is held until commit:
-- 1. The index on deliveries, first (as 0004): its build takes a SHARE lock on deliveries
--    for one scan of the table, which blocks emits, claims and delivery updates (not
--    reads) while it runs. From then on every write of a dead delivery also maintains it
--    (a partial index: only rows with state = 'dead').
-- 2. The two events indexes: a SHARE lock on events for one scan each, which blocks emits;
--    afterwards each is one more index entry per emitted event.
-- On a large, busy database build them beforehand without blocking, then migrate (IF NOT
-- EXISTS makes this file skip them):
--   CREATE INDEX CONCURRENTLY deliveries_dead_by_time_id
--       ON <schema>.deliveries (finished_at, id) WHERE state = 'dead';
--   CREATE INDEX CONCURRENTLY events_by_type ON <schema>.events (type, id);
--   CREATE INDEX CONCURRENTLY events_by_tenant ON <schema>.events (tenant, id)
--       WHERE tenant IS NOT NULL;
-- A CONCURRENTLY build that fails or is cancelled leaves an INVALID index behind under the
-- same name, which IF NOT EXISTS then skips: the migration succeeds and the queries never
-- use it. Check before migrating that none is invalid, and drop and rebuild any that is:
--   SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
--    WHERE NOT i.indisvalid AND c.relnamespace = '<schema>'::regnamespace;
--   DROP INDEX CONCURRENTLY <schema>.<name>;  -- then CREATE ... CONCURRENTLY again

-- Dead letters, most recently dead first (DEAD_LIST orders by finished_at DESC, id DESC;
-- pages continue after the last row's (finished_at, id)): with the id in the key the walk
-- starts at the cursor and stops after the page, where 0002's (finished_at) index makes
-- the planner sort every dead row and hash-join them all with events (measured in
-- bench/web.py: 50,000 dead among 1,000,000 events).
CREATE INDEX IF NOT EXISTS deliveries_dead_by_time_id ON deliveries (finished_at, id)
    WHERE state = 'dead';

CREATE INDEX IF NOT EXISTS events_by_type ON events (type, id);
-- Tenant-less events are listed without a tenant filter (the primary key serves them).
CREATE INDEX IF NOT EXISTS events_by_tenant ON events (tenant, id) WHERE tenant IS NOT NULL;
