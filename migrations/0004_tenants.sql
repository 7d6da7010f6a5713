-- outbox 0004: tenants, wildcard type filters, and the indexes that keep fan-out and the
-- fair claim proportional to their own work.
--
-- Locks, in order (the whole file is one transaction, so each lock is held until commit):
-- 1. The index on deliveries, first: its build takes a SHARE lock on deliveries for one
--    scan of the table, which blocks emits and claims (not reads) while it runs. On a
--    large, busy table build it beforehand without blocking, then migrate (IF NOT EXISTS
--    makes this file skip it):
--   CREATE INDEX CONCURRENTLY deliveries_pending_by_endpoint
--       ON <schema>.deliveries (endpoint_id, visible_at)
--       WHERE state = 'pending' AND visible_at < 'infinity';
-- 2. The ALTERs take ACCESS EXCLUSIVE on events and endpoints until commit: catalog-only
--    changes (columns without a default, or with a constant one, which PostgreSQL 11+
--    records without rewriting the table; CHECK constraints NOT VALID, so no scan: they
--    are enforced on every row written from now on, and the existing rows satisfy them),
--    then the endpoints indexes (endpoints is small: milliseconds). What can be long is
--    the wait for the lock: an ALTER queues behind any open transaction that touched the
--    table, and every later query on it queues behind the ALTER. Run it when no long
--    transaction is open, or bound the wait and retry on failure (libpq reads PGOPTIONS;
--    the migration rolls back whole if a lock is not granted in time):
--      PGOPTIONS='-c lock_timeout=3s' outbox migrate

-- The fair claim rotates over endpoints with pending work (a skip scan over endpoint_id)
-- and takes each one's oldest due rows; parked rows (visible_at = infinity: a disabled
-- endpoint) are left out, so a disabled endpoint costs the rotation nothing.
CREATE INDEX IF NOT EXISTS deliveries_pending_by_endpoint
    ON deliveries (endpoint_id, visible_at)
    WHERE state = 'pending' AND visible_at < 'infinity';

-- The tenant an event belongs to (NULL: tenant-less, as every event before this version).
ALTER TABLE events ADD COLUMN tenant text;

-- An endpoint belongs to one tenant (NULL: tenant-less), or opts in to every tenant's
-- events (all_tenants, for internal consumers; never a default). Routing: an event reaches
-- the enabled endpoints of its own tenant (tenant-less events: tenant-less endpoints) plus
-- the all-tenants endpoints, filtered by type.
ALTER TABLE endpoints ADD COLUMN tenant text;
ALTER TABLE endpoints ADD COLUMN all_tenants boolean NOT NULL DEFAULT false;

ALTER TABLE events ADD CONSTRAINT events_tenant_length
    CHECK (length(tenant) BETWEEN 1 AND 128) NOT VALID;
ALTER TABLE endpoints ADD CONSTRAINT endpoints_tenant_length
    CHECK (length(tenant) BETWEEN 1 AND 128) NOT VALID;
ALTER TABLE endpoints ADD CONSTRAINT endpoints_one_tenant_or_all
    CHECK (NOT (all_tenants AND tenant IS NOT NULL)) NOT VALID;

-- Fan-out reads only the event's tenant's endpoints (tenant = $1, or tenant IS NULL for a
-- tenant-less event) and the all-tenants ones, by index: never a scan of all endpoints.
CREATE INDEX IF NOT EXISTS endpoints_by_tenant ON endpoints (tenant, id);
CREATE INDEX IF NOT EXISTS endpoints_all_tenants ON endpoints (id) WHERE all_tenants;
