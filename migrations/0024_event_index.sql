-- outbox 0024: a partition made from now on finds its deliveries by event with a plain
-- index on (event_id) instead of the unique (event_id, endpoint_id) (fewer WAL bytes per
-- delivery; bench/history_volume.py, figures in bench/README.md "WAL per event").
--
-- Why. Every row version of a delivery gets an entry in every index (neither the claim's
-- update nor the completion's is HOT: migrations/0019_wal.sql), so this index took three
-- entries per delivery, ~300 B of WAL per event in bench.history_volume's breakdown, the
-- largest single index. Its uniqueness guarded nothing since migration 0018 (it was per
-- partition already; emit writes one delivery per (event, endpoint) in one statement and
-- nothing inserts a delivery otherwise), and every reader looks deliveries up by event id
-- alone (an event's deliveries, the events list's counts, the events prune). A narrower
-- key (16 bytes instead of 32) makes each entry smaller: measured on a private server,
-- insert + claim-like update + completion-like update of 100,000 rows, WAL per row
-- 1,046 B without either index, 1,349 B with the unique pair, 1,290 B with (event_id)
-- alone, 1,323 B with a hash index on event_id (its metapage and bucket splits cost more
-- than the narrower entries save).
--
-- Which partitions. Partitions made by partition_create from now on (the worker makes one
-- ahead of the open one); the empty partitions already made ahead are switched here (no
-- row to index: catalog work only); the open partition and the closed ones keep the
-- unique index until they are dropped. Readers do not care which of the two a partition
-- has.
--
-- Locks: CREATE OR REPLACE FUNCTION; on each empty partition made ahead, DROP INDEX and
-- CREATE INDEX (ACCESS EXCLUSIVE / SHARE on that empty partition, milliseconds).

CREATE OR REPLACE FUNCTION partition_create(p_k bigint) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    stride constant bigint := 4294967296;
    lo bigint := p_k * stride;
    hi bigint := (p_k + 1) * stride;
    d text := format('deliveries_p%s', p_k);
    a text := format('delivery_attempts_p%s', p_k);
    part text;
    r record;
BEGIN
    IF EXISTS (SELECT FROM delivery_partitions WHERE k = p_k) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE deliveries INCLUDING DEFAULTS, CHECK (id >= %s AND'
                   ' id < %s)) WITH (autovacuum_vacuum_scale_factor = 0.01,'
                   ' autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 1,'
                   ' fillfactor = 85)', d, lo, hi);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT deliveries_state_check CHECK (state IN'
                   ' (''pending'', ''delivered'', ''dead'', ''fresh'', ''waiting''))', d);
    EXECUTE format('CREATE INDEX %I ON %I (event_id)', d || '_event', d);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (endpoint_id, key) WHERE key IS NOT NULL'
                   ' AND state IN (''pending'', ''dead'')', d || '_key_head', d);
    EXECUTE format('CREATE TABLE %I (LIKE delivery_attempts INCLUDING DEFAULTS,'
                   ' CHECK (delivery_id >= %s AND delivery_id < %s))', a, lo, hi);
    -- The parents' indexes, under names that say which partition and which index
    -- (deliveries_p7_due, ...: what EXPLAIN shows); ATTACH adopts them.
    FOR r IN SELECT i.relname, pg_get_indexdef(x.indexrelid) AS def, t.relname AS tab
               FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
               JOIN pg_class t ON t.oid = x.indrelid
              WHERE x.indrelid IN ('deliveries'::regclass, 'delivery_attempts'::regclass)
                AND NOT x.indisunique LOOP
        part := CASE r.tab WHEN 'deliveries' THEN d ELSE a END;
        EXECUTE regexp_replace(r.def, '^CREATE INDEX \S+ ON (ONLY )?\S+',
                               format('CREATE INDEX %I ON %I',
                                      part || substr(r.relname, length(r.tab) + 1), part));
    END LOOP;
    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   d, lo, hi);
    EXECUTE format('ALTER TABLE delivery_attempts ATTACH PARTITION %I'
                   ' FOR VALUES FROM (%s) TO (%s)', a, lo, hi);
    INSERT INTO delivery_partitions (k, deliveries, attempts, lo, hi) VALUES (p_k, d, a, lo, hi);
    RETURN true;
END
$$;

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.deliveries FROM delivery_partitions p
              WHERE p.opened_at IS NULL AND p.lo IS NOT NULL
                AND to_regclass(p.deliveries || '_event_id_endpoint_id_key') IS NOT NULL LOOP
        EXECUTE format('DROP INDEX %I', r.deliveries || '_event_id_endpoint_id_key');
        EXECUTE format('CREATE INDEX %I ON %I (event_id)', r.deliveries || '_event',
                       r.deliveries);
    END LOOP;
END
$$;
