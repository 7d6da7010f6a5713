-- outbox 0008: per-endpoint flow control shared by every worker (docs/guides/flow-control.md).
--
-- Settings, on endpoints (NULL: none):
--   rate_limit         requests per second, the operator's limit (and the ceiling of the
--                      tenant's own and of the adaptive rate)
--   rate_burst         requests allowed at once above the rate (NULL: one second's worth)
--   tenant_rate_limit  the tenant's own limit, set from the portal; never above rate_limit
-- The effective fixed limit is the lower of the two.
--
-- State, in endpoint_flow: one narrow row per endpoint, so the claim's token accounting
-- never rewrites the wide endpoints row. The claim (delivery/queries.py CLAIM) reads it by
-- primary key; when the endpoint is flow-controlled (a fixed limit, an adaptive rate in
-- force, or a pause) it locks it FOR UPDATE SKIP LOCKED, takes at most floor(tokens) rows
-- and writes the tokens back in the same statement: a token bucket that holds across
-- every worker process and host. A claim that finds the row locked by another claim takes
-- nothing of that endpoint this time.
--   tokens, refilled_at  the bucket: tokens at refilled_at (refill starts then; a pause
--                        moves it to the pause's end)
--   adaptive_rate        requests per second allowed after the last decrease (AIMD: a
--                        429, 503 or timeout multiplies it by 0.7, at most once a second;
--                        it grows by increase_per_second each second after decreased_at)
--   paused_until         Retry-After: no claim of the endpoint before this
--   throttled_total      decreases and pauses so far (shown by `outbox endpoints show`)
--
-- Locks: ALTER TABLE endpoints (ACCESS EXCLUSIVE, catalog-only: columns without defaults),
-- a new table, one row per existing endpoint inserted while the lock is held.

ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS rate_limit double precision
    CHECK (rate_limit > 0);
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS rate_burst integer CHECK (rate_burst > 0);
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS tenant_rate_limit double precision
    CHECK (tenant_rate_limit > 0);

CREATE TABLE IF NOT EXISTS endpoint_flow (
    endpoint_id         uuid PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    tokens              double precision NOT NULL DEFAULT 0,
    refilled_at         timestamptz NOT NULL DEFAULT now(),
    adaptive_rate       double precision,
    increase_per_second double precision,
    decreased_at        timestamptz,
    paused_until        timestamptz,
    throttled_total     bigint NOT NULL DEFAULT 0
);
-- Updated on every claim of a limited endpoint: leave room for HOT updates.
ALTER TABLE endpoint_flow SET (fillfactor = 50);

INSERT INTO endpoint_flow (endpoint_id) SELECT id FROM endpoints ON CONFLICT DO NOTHING;

-- The worker's allowed-rate gauge (delivery/queries.py FLOW_GAUGES) reads only the
-- flow-controlled endpoints, through these: its cost follows them, not every endpoint.
-- (decreased_at and paused_until change only when an endpoint is throttled; the claim's
-- token updates touch no indexed column and stay HOT.)
CREATE INDEX IF NOT EXISTS endpoints_rate_limited ON endpoints (id)
    WHERE rate_limit IS NOT NULL OR tenant_rate_limit IS NOT NULL;
CREATE INDEX IF NOT EXISTS endpoint_flow_decreased ON endpoint_flow (decreased_at)
    WHERE decreased_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS endpoint_flow_paused ON endpoint_flow (paused_until)
    WHERE paused_until IS NOT NULL;

-- Every endpoint has its row from its creation on, whoever inserts it.
CREATE OR REPLACE FUNCTION endpoint_flow_row() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO %I.endpoint_flow (endpoint_id) VALUES ($1)'
                   ' ON CONFLICT DO NOTHING', TG_TABLE_SCHEMA) USING NEW.id;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS endpoint_flow_row ON endpoints;
CREATE TRIGGER endpoint_flow_row AFTER INSERT ON endpoints
    FOR EACH ROW EXECUTE FUNCTION endpoint_flow_row();
