-- outbox 0018: time-partitioned deliveries and attempt logs; retention by dropping partitions
-- (docs/guides/partitions.md). Converts an existing database IN PLACE, copying no row.
--
-- DESIGN
-- Which tables. `deliveries` and `delivery_attempts` are partitioned (declarative RANGE
-- partitioning, no extension). `events` is NOT partitioned by this migration: emit's
-- idempotency is `INSERT ... ON CONFLICT (idempotency_key)`, whose arbiter must be a unique
-- index of the table, and a unique index of a partitioned table must contain its partition
-- key; partitioning events means changing every emit statement and the SQL function
-- outbox.emit (migration 0011). Emit's SQL is left exactly as it was, so its cost is too;
-- events keep being pruned by DELETE once none of their deliveries is left (the prune's
-- events phase). The inbox table is left as it is (`outbox inbox prune`).
--
-- Which key. deliveries.id (a bigint identity, the order of a key's deliveries, the key of
-- every completion and claim UPDATE) is the partition key, so the primary key stays
-- PRIMARY KEY (id), every `WHERE id = ...` touches one partition, and no column is added.
-- An id range is made a time range by the partition manager: partition k holds the ids
-- [k * 2^32, (k + 1) * 2^32); when the current partition has been open for
-- OUTBOX_PARTITION_SECONDS the manager moves the identity forward to the next partition's
-- first id (setval: ids only ever grow, so id order is still insertion order and a key's
-- order is kept). So a partition holds the deliveries emitted between two moves;
-- delivery_partitions records when each one opened and closed. A stalled manager costs
-- nothing but wider partitions (2^32 ids each, far more than any partition fills); ids stay
-- below 2^53 (exact in JSON and JavaScript) for 2^21 partitions (243 days of 10 s
-- partitions, 239 years of hourly ones). delivery_attempts is partitioned by delivery_id on
-- the same bounds, so a delivery's attempt log sits in the partition numbered like its
-- delivery's and the two are dropped together.
--
-- Everything is partitioned, nothing is moved: a delivery is written once by emit and
-- updated in place by claim and completion, as before (no copy of finished rows into a
-- history table: that would be an extra insert, delete and their WAL per delivery).
-- The claim's partial indexes (pending, due, fresh) are partitioned indexes: each
-- partition's holds only that partition's pending rows, so old partitions' are empty and
-- the claim's cost follows the backlog, never the rows of history; and with the claim's
-- floor (claim_floor(), below: `id >= floor` prunes every partition without queued work
-- from its plan) not the number of partitions kept either (bench/history.py --partitions;
-- tests/integration/test_claim_plan.py).
--
-- What blocks a drop. A delivery cannot move to another partition (its id is its
-- partition), so a partition is dropped only when none of its rows must survive
-- (partition_status, below, says which reason holds): the partition is still open or
-- closed less than the retention ago; a delivery in it is pending (due, retrying, leased),
-- fresh or waiting (ordered); a dead delivery still holds its ordered key; a dead delivery
-- is younger than OUTBOX_DEAD_RETENTION_SECONDS; a delivery finished within the retention.
-- Meanwhile the prune's DELETE phase still removes its delivered rows past retention, so a
-- blocked partition shrinks to its survivors, and is dropped once they finish.
--
-- Uniqueness. UNIQUE (event_id, endpoint_id) and the ordered key-head guard
-- deliveries_key_head cannot be global unique indexes (they lack the partition key): they
-- are kept on each partition (created by partition_create; the converted table keeps its
-- own). A duplicate across two partitions is no longer refused by the database; emit writes
-- one delivery per (event, endpoint) in one statement, and a key's head is made only under
-- the key's advisory lock (migration 0005), so neither guard is what keeps them unique.
--
-- UPGRADE IN PLACE (zero copy): the existing tables become the first partition:
--   deliveries -> deliveries_legacy (its indexes renamed deliveries_legacy_*), a CHECK
--   (id < B) is added and validated (one scan of the old table's heap), then the new
--   partitioned `deliveries` attaches it FOR VALUES FROM (MINVALUE) TO (B): the validated
--   CHECK proves the bound, so ATTACH does not scan again, and every index of the old table
--   is adopted by the parent's index of the same definition (none is rebuilt). The same for
--   delivery_attempts (CHECK delivery_id < B). B is the first multiple of 2^32 above every
--   id ever handed out.
-- Locks: ACCESS EXCLUSIVE on deliveries and delivery_attempts until commit (the whole file
-- is one transaction). Workers and emits need not be stopped: their statements wait for the
-- lock, then run against the new parent under the same name (prepared statements re-plan).
-- The window is the two CHECK scans plus catalog work: the whole `outbox migrate` of this
-- file took 0.19, 0.29 and 0.34 s (median 0.29 s) on 300,000 deliveries and 300,000
-- attempt rows, on a shared 2-core machine (python -m bench.partition_upgrade); the scans
-- grow with the tables, the rest does not. On a very large table validate the CHECKs
-- beforehand without blocking writes
-- (VALIDATE takes SHARE UPDATE EXCLUSIVE), with B = the bound this file would choose:
--   SELECT ((greatest(max(id), 0) / 4294967296) + 1) * 4294967296 FROM <schema>.deliveries;
--   -- use a B comfortably above the sequence's last_value: ids handed out before the
--   -- migration must stay below it
--   ALTER TABLE <schema>.deliveries ADD CONSTRAINT deliveries_legacy_bound
--       CHECK (id < B) NOT VALID;
--   ALTER TABLE <schema>.deliveries VALIDATE CONSTRAINT deliveries_legacy_bound;
--   ALTER TABLE <schema>.delivery_attempts ADD CONSTRAINT delivery_attempts_legacy_bound
--       CHECK (delivery_id < B) NOT VALID;
--   ALTER TABLE <schema>.delivery_attempts VALIDATE CONSTRAINT delivery_attempts_legacy_bound;
-- and the migration uses that B (if it is above every id handed out) without scanning.
-- Bound the wait for the lock as for 0004: PGOPTIONS='-c lock_timeout=3s' outbox migrate

CREATE TABLE delivery_partitions (
    k          bigint PRIMARY KEY,            -- ids [k * 2^32, (k + 1) * 2^32)
    deliveries text NOT NULL UNIQUE,          -- the partition of deliveries
    attempts   text NOT NULL UNIQUE,          -- the partition of delivery_attempts
    lo         bigint,                        -- NULL: MINVALUE (the converted table)
    hi         bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    opened_at  timestamptz,                   -- the identity moved into it (NULL: ahead)
    closed_at  timestamptz                    -- the next partition opened
);

DO $$
DECLARE
    stride constant bigint := 4294967296;
    last_id bigint;
    bound bigint;
    pre bigint;
    r record;
BEGIN
    SELECT greatest(COALESCE((SELECT max(id) FROM deliveries), 0),
                    COALESCE(pg_sequence_last_value(
                        pg_get_serial_sequence(format('%I.deliveries', current_schema()),
                                               'id')::regclass), 0),
                    COALESCE((SELECT max(delivery_id) FROM delivery_attempts), 0))
      INTO last_id;
    bound := (last_id / stride + 1) * stride;
    -- A bound validated beforehand (see above) is used as is when it is high enough.
    SELECT (regexp_match(pg_get_constraintdef(c.oid), 'id < ''?(\d+)'))[1]::bigint INTO pre
      FROM pg_constraint c
     WHERE c.conrelid = 'deliveries'::regclass AND c.conname = 'deliveries_legacy_bound'
       AND c.convalidated;
    IF pre IS NOT NULL AND pre > last_id AND pre % stride = 0
       AND EXISTS (SELECT FROM pg_constraint c
                    WHERE c.conrelid = 'delivery_attempts'::regclass AND c.convalidated
                      AND c.conname = 'delivery_attempts_legacy_bound'
                      AND pg_get_constraintdef(c.oid) ~ ('delivery_id < ''?' || pre || '\M'))
    THEN
        bound := pre;
    ELSE
        ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_legacy_bound;
        ALTER TABLE delivery_attempts DROP CONSTRAINT IF EXISTS delivery_attempts_legacy_bound;
        EXECUTE format('ALTER TABLE deliveries ADD CONSTRAINT deliveries_legacy_bound'
                       ' CHECK (id < %s)', bound);
        EXECUTE format('ALTER TABLE delivery_attempts ADD CONSTRAINT'
                       ' delivery_attempts_legacy_bound CHECK (delivery_id < %s)', bound);
    END IF;

    -- The old tables and their indexes step aside under *_legacy names.
    ALTER TABLE deliveries RENAME TO deliveries_legacy;
    ALTER TABLE delivery_attempts RENAME TO delivery_attempts_legacy;
    FOR r IN SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
              WHERE x.indrelid IN ('deliveries_legacy'::regclass,
                                   'delivery_attempts_legacy'::regclass) LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname,
                       regexp_replace(r.relname, '^(deliveries|delivery_attempts)_',
                                      '\1_legacy_'));
    END LOOP;

    -- The partitioned parents: the same columns; the identity continues above the bound.
    CREATE TABLE deliveries (
        LIKE deliveries_legacy INCLUDING DEFAULTS INCLUDING IDENTITY
    ) PARTITION BY RANGE (id);
    ALTER TABLE deliveries ADD CONSTRAINT deliveries_pkey PRIMARY KEY (id);
    ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
        CHECK (state IN ('pending', 'delivered', 'dead', 'fresh', 'waiting')) NOT VALID;
    CREATE TABLE delivery_attempts (
        LIKE delivery_attempts_legacy INCLUDING DEFAULTS INCLUDING IDENTITY
    ) PARTITION BY RANGE (delivery_id);
    EXECUTE format('ALTER TABLE delivery_attempts ALTER COLUMN id RESTART WITH %s',
                   COALESCE(pg_sequence_last_value(pg_get_serial_sequence(
                       format('%I.delivery_attempts_legacy', current_schema()), 'id')::regclass),
                       0) + 1);
    EXECUTE format('ALTER TABLE deliveries ALTER COLUMN id RESTART WITH %s', bound);

    -- Every non-unique index of the old table, on the parent under its old name (ATTACH
    -- adopts the old index of the same definition; new partitions get their own).
    FOR r IN SELECT i.relname, pg_get_indexdef(x.indexrelid) AS def, t.relname AS tab
               FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
               JOIN pg_class t ON t.oid = x.indrelid
              WHERE x.indrelid IN ('deliveries_legacy'::regclass,
                                   'delivery_attempts_legacy'::regclass)
                AND NOT x.indisunique LOOP
        EXECUTE regexp_replace(r.def, '^CREATE INDEX \S+ ON (ONLY )?\S+',
                               format('CREATE INDEX %I ON %I',
                                      regexp_replace(r.relname, '_legacy_', '_'),
                                      regexp_replace(r.tab, '_legacy$', '')));
    END LOOP;

    EXECUTE format('ALTER TABLE deliveries ATTACH PARTITION deliveries_legacy'
                   ' FOR VALUES FROM (MINVALUE) TO (%s)', bound);
    EXECUTE format('ALTER TABLE delivery_attempts ATTACH PARTITION delivery_attempts_legacy'
                   ' FOR VALUES FROM (MINVALUE) TO (%s)', bound);

    -- Whoever could use the old tables can use the new parents (roles.sql's grants).
    FOR r IN SELECT t.tab, a.privilege_type, a.grantee
               FROM (VALUES ('deliveries'), ('delivery_attempts')) t(tab)
              CROSS JOIN LATERAL aclexplode((SELECT relacl FROM pg_class
                                              WHERE oid = (t.tab || '_legacy')::regclass)) a
              WHERE a.grantee <> (SELECT relowner FROM pg_class
                                   WHERE oid = (t.tab || '_legacy')::regclass) LOOP
        EXECUTE format('GRANT %s ON %I TO %s', r.privilege_type, r.tab,
                       CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
    END LOOP;

    INSERT INTO delivery_partitions (k, deliveries, attempts, lo, hi, opened_at, closed_at)
    VALUES (bound / stride - 1, 'deliveries_legacy', 'delivery_attempts_legacy', NULL, bound,
            NULL, now());
END
$$;

-- Creates partition k of both tables (empty), attached without blocking emits or claims
-- (CREATE TABLE then ATTACH: SHARE UPDATE EXCLUSIVE on the parents; the new table's CHECK
-- makes ATTACH skip its scan). Its per-partition unique guards are made here.
CREATE FUNCTION partition_create(p_k bigint) RETURNS boolean
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
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (event_id, endpoint_id)',
                   d || '_event_id_endpoint_id_key', d);
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

-- The manager's forward step (worker and `outbox prune`; one caller at a time: a
-- transaction-level advisory lock): when the open partition has been open p_width seconds
-- (or none is open), the next one opens: the identity moves to its first id, it is marked
-- opened and the previous one closed. Then p_ahead partitions past the open one exist.
-- Returns how many partitions it created.
CREATE FUNCTION partitions_advance(p_width double precision, p_ahead integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    stride constant bigint := 4294967296;
    cur delivery_partitions;
    seq regclass := pg_get_serial_sequence(format('%I.deliveries', current_schema()),
                                           'id')::regclass;
    made integer := 0;
    nxt bigint;
BEGIN
    IF p_width < 1 OR p_ahead < 1 THEN
        RAISE EXCEPTION 'partition width must be at least 1 s and ahead at least 1'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('outbox.partitions'), hashtext(current_schema()));
    SELECT * INTO cur FROM delivery_partitions
     WHERE opened_at IS NOT NULL AND closed_at IS NULL ORDER BY k DESC LIMIT 1;
    IF cur.k IS NULL OR cur.opened_at <= now() - make_interval(secs => p_width) THEN
        nxt := greatest(COALESCE(cur.k, -1),
                        (SELECT max(k) FROM delivery_partitions WHERE closed_at IS NOT NULL),
                        COALESCE(pg_sequence_last_value(seq), 0) / stride) + 1;
        IF partition_create(nxt) THEN
            made := made + 1;
        END IF;
        IF COALESCE(pg_sequence_last_value(seq), 0) < nxt * stride THEN
            PERFORM setval(seq, nxt * stride, false);
        END IF;
        UPDATE delivery_partitions SET closed_at = now()
         WHERE k < nxt AND closed_at IS NULL;
        UPDATE delivery_partitions SET opened_at = now() WHERE k = nxt;
        cur.k := nxt;
    END IF;
    FOR i IN 1 .. p_ahead LOOP
        IF partition_create(cur.k + i) THEN
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END
$$;

-- Every partition with its state: what blocks its drop (NULL: droppable). p_cutoff: the
-- retention's cutoff (closed before it, every row finished before it); p_dead_cutoff: dead
-- rows that died before it may go (NULL: every dead row is kept). Each test is one probe of
-- a partial index of that partition (due/pending, fresh, queued, key head, dead by time,
-- finished): its cost follows the partitions, not their rows.
CREATE FUNCTION partition_status(p_cutoff timestamptz, p_dead_cutoff timestamptz)
RETURNS TABLE (k bigint, deliveries text, attempts text, lo bigint, hi bigint,
               opened_at timestamptz, closed_at timestamptz, rows_estimate bigint,
               bytes bigint, blocked_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    p delivery_partitions;
    probe text;
    hit boolean;
BEGIN
    FOR p IN SELECT * FROM delivery_partitions ORDER BY delivery_partitions.k LOOP
        k := p.k; deliveries := p.deliveries; attempts := p.attempts; lo := p.lo;
        hi := p.hi; opened_at := p.opened_at; closed_at := p.closed_at;
        SELECT greatest(c.reltuples, 0)::bigint INTO rows_estimate FROM pg_class c
         WHERE c.oid = to_regclass(quote_ident(p.deliveries));
        bytes := COALESCE(pg_total_relation_size(to_regclass(quote_ident(p.deliveries))), 0)
               + COALESCE(pg_total_relation_size(to_regclass(quote_ident(p.attempts))), 0);
        blocked_by := CASE WHEN p.opened_at IS NULL AND p.closed_at IS NULL THEN 'ahead'
                           WHEN p.closed_at IS NULL THEN 'open'
                           WHEN p.closed_at >= p_cutoff THEN 'within retention' END;
        IF blocked_by IS NULL THEN
            FOREACH probe IN ARRAY ARRAY[
                'pending deliveries|state = ''pending''',
                'ordered deliveries queued|state IN (''fresh'', ''waiting'')',
                'a dead head holding its ordered key|key IS NOT NULL'
                    || ' AND state IN (''pending'', ''dead'') AND state = ''dead''',
                'dead deliveries kept for replay|state = ''dead'' AND ($2 IS NULL OR'
                    || ' finished_at >= $2)',
                'deliveries finished within retention|state <> ''pending'''
                    || ' AND finished_at >= $1'] LOOP
                EXECUTE format('SELECT EXISTS (SELECT FROM %I WHERE %s)', p.deliveries,
                               split_part(probe, '|', 2))
                   INTO hit USING p_cutoff, p_dead_cutoff;
                IF hit THEN
                    blocked_by := split_part(probe, '|', 1);
                    EXIT;
                END IF;
            END LOOP;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Drops partition k of both tables if nothing blocks it (re-checked under the parents'
-- locks: no statement can change its rows meanwhile). DETACH needs ACCESS EXCLUSIVE on the
-- parents for a moment (catalog work only: milliseconds); the wait for it is bounded by
-- p_lock_timeout_ms (a busy table: the call fails with lock_not_available, and nothing
-- changed; the next call retries). Returns whether it dropped.
CREATE FUNCTION partition_drop(p_k bigint, p_cutoff timestamptz, p_dead_cutoff timestamptz,
                               p_lock_timeout_ms integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    p record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('outbox.partitions'), hashtext(current_schema()));
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true);
    LOCK TABLE deliveries, delivery_attempts IN ACCESS EXCLUSIVE MODE;
    SELECT * INTO p FROM partition_status(p_cutoff, p_dead_cutoff) s WHERE s.k = p_k;
    IF p.k IS NULL OR p.blocked_by IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE deliveries DETACH PARTITION %I', p.deliveries);
    EXECUTE format('ALTER TABLE delivery_attempts DETACH PARTITION %I', p.attempts);
    EXECUTE format('DROP TABLE %I, %I', p.deliveries, p.attempts);
    DELETE FROM delivery_partitions WHERE delivery_partitions.k = p_k;
    RETURN true;
END
$$;

-- The claim's floor: the lowest delivery id a claim must look at. Every partition below the
-- oldest one holding a pending, fresh or waiting delivery holds nothing claimable, so the
-- claim adds `id >= floor` and PostgreSQL leaves those partitions out of its plan (each
-- partition kept costs every claim's planning and index probes otherwise). Never above the
-- partition closed last: a transaction that took its ids before the identity moved on may
-- still insert there. The worker re-reads it every second (delivery/store.py): a dead
-- delivery replayed in an older partition is claimed after at most that refresh. Cost: two
-- partial-index probes per closed partition, oldest first, until one holds queued work.
CREATE FUNCTION claim_floor() RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    lowest constant bigint := -9223372036854775808;
    recent bigint;
    p delivery_partitions;
    hit boolean;
BEGIN
    SELECT COALESCE(d.lo, lowest) INTO recent FROM delivery_partitions d
     WHERE d.closed_at IS NOT NULL ORDER BY d.k DESC LIMIT 1;
    IF recent IS NULL THEN
        RETURN lowest;  -- nothing closed yet: every partition
    END IF;
    FOR p IN SELECT * FROM delivery_partitions d
              WHERE d.closed_at IS NOT NULL AND COALESCE(d.lo, lowest) < recent
              ORDER BY d.k LOOP
        EXECUTE format('SELECT EXISTS (SELECT FROM %1$I WHERE state = ''pending'')'
                       ' OR EXISTS (SELECT FROM %1$I WHERE state IN (''fresh'', ''waiting''))',
                       p.deliveries) INTO hit;
        IF hit THEN
            RETURN COALESCE(p.lo, lowest);
        END IF;
    END LOOP;
    RETURN recent;
END
$$;

DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['claim_floor()', 'partition_create(bigint)',
                             'partitions_advance(double precision, integer)',
                             'partition_status(timestamptz, timestamptz)',
                             'partition_drop(bigint, timestamptz, timestamptz, integer)'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_catalog',
                       current_schema(), f, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %I.%s FROM PUBLIC', current_schema(), f);
    END LOOP;
END
$$;

-- The first partition of the new layout opens now (the identity moves to it).
SELECT partitions_advance(3600, 1);
