-- outbox 0013: operational events (docs/guides/operational-events.md). The sender emits
-- outbox.* events through its own outbox, in the same statement as the change they report
-- (the worker's completion, an endpoint's enable/disable): they need an event id made in
-- SQL, and each endpoint's run of consecutive failed attempts.
--
-- Locks: ALTER TABLE endpoints takes ACCESS EXCLUSIVE on endpoints until commit, catalog-only
-- (a column with a constant default and a nullable one: no rewrite); endpoints is small.
-- Bound the wait for the lock as for 0004: PGOPTIONS='-c lock_timeout=3s' outbox migrate

-- Consecutive failed attempts of the endpoint, across all workers, in completion order
-- (any attempt that is not delivered: retry, dead, exhausted, 410; deliveries of
-- operational events are not counted). Reset by a delivered attempt.
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS failure_streak integer NOT NULL DEFAULT 0;
-- When the endpoint entered 'failing' (its streak reached the threshold: the worker's
-- OUTBOX_FAILING_THRESHOLD), NULL while it is healthy. outbox.endpoint.failing is emitted
-- when it is set, outbox.endpoint.recovered when a delivered attempt clears it.
ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS failing_since timestamptz;

-- Operational events get their ids from uuid7() (migrations/0011_sql_emit.sql), the
-- UUIDv7 the SQL emit makes.

-- Write operational events: p_events is a json array of {"type", "tenant", "data"}; each
-- becomes an event (an id by uuid7(), the payload the Standard Webhooks envelope
-- {"type", "timestamp", "data"}, "timestamp" the transaction's time in RFC 3339 UTC) in
-- array order. Returns the rows written, for the caller's fan-out (emit's routing rule,
-- outbox._db.queries.opevents). SECURITY DEFINER: the worker role may call it without
-- INSERT on events, so it can write operational events (outbox.*) and nothing else; any
-- other type raises and the caller's statement rolls back whole.
CREATE OR REPLACE FUNCTION op_insert(p_events json)
RETURNS TABLE (id uuid, type text, tenant text, key text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM json_array_elements(p_events) e
                WHERE NOT starts_with(e->>'type', 'outbox.')) THEN
        RAISE EXCEPTION 'op_insert writes operational events (outbox.*) only'
            USING ERRCODE = '42501';  -- insufficient_privilege
    END IF;
    RETURN QUERY
    WITH ins AS (
        INSERT INTO events AS ev (id, type, payload, tenant)
        SELECT uuid7(), x.e->>'type',
               json_build_object(
                   'type', x.e->>'type',
                   'timestamp', to_char(now() AT TIME ZONE 'UTC',
                                        'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                   'data', x.e->'data'),
               x.e->>'tenant'
          FROM json_array_elements(p_events) WITH ORDINALITY AS x(e, n)
         ORDER BY x.n
        RETURNING ev.id, ev.type, ev.tenant, ev.key)
    SELECT * FROM ins;
END
$$;
REVOKE EXECUTE ON FUNCTION op_insert(json) FROM PUBLIC;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION %I.op_insert(json) SET search_path = %I, pg_catalog',
                   current_schema(), current_schema());
END
$$;
