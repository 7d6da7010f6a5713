-- outbox 0004: tenants, wildcard type filters, and the indexes that keep fan-out and the
-- fair claim proportional to their own work.
--
-- Safe to apply under load: the new columns have no default (events.tenant,
-- endpoints.tenant) or a constant one (all_tenants), which PostgreSQL 11+ records in the
-- catalog without rewriting the table; the CHECK constraints are added NOT VALID, so no
-- scan of the table runs under the lock: PostgreSQL enforces them on every row inserted or
-- updated from now on, and the existing rows (tenant NULL, all_tenants false) satisfy them.
-- Each ALTER's ACCESS EXCLUSIVE lock lasts until the migration commits (milliseconds),
-- but it waits behind any long transaction that touched these tables.
--
-- The index on deliveries is built inside the migration's transaction, which blocks
-- writes to deliveries (emits) for one scan of the table. On a large, busy table build it
-- beforehand without blocking, then migrate (IF NOT EXISTS makes this file skip it):
--   CREATE INDEX CONCURRENTLY deliveries_pending_by_endpoint
--       ON <schema>.deliveries (endpoint_id, visible_at)
--       WHERE state = 'pending' AND visible_at < 'infinity';
-- (endpoints is small: its indexes build in milliseconds.)

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

-- The fair claim rotates over endpoints with pending work (a skip scan over endpoint_id)
-- and takes each one's oldest due rows; parked rows (visible_at = infinity: a disabled
-- endpoint) are left out, so a disabled endpoint costs the rotation nothing.
CREATE INDEX IF NOT EXISTS deliveries_pending_by_endpoint
    ON deliveries (endpoint_id, visible_at)
    WHERE state = 'pending' AND visible_at < 'infinity';
