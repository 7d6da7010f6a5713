-- outbox 0025: events partitioned by time (ranges of their UUIDv7 ids), dropped whole like
-- the deliveries; idempotency keys in a small table of their own, event_keys
-- (docs/guides/partitions.md; WAL figures in bench/README.md "WAL per event").
--
-- Why. Until now the events of expired deliveries were deleted row by row (the prune's
-- events phase): a heap DELETE per event (with a full-page image of every page first
-- touched after a checkpoint), the index pages VACUUM then deletes, and the VACUUM itself:
-- ~140 B of WAL per event in bench.history_volume's breakdown, the largest cost left after
-- the deliveries went to partitions (migrations/0018_partitioned_history.sql). Dropping a
-- partition writes no per-row WAL.
--
-- Which key. events.id, a UUIDv7 (its first 48 bits: the emitting clock's millisecond), so
-- an id range is a time range and the primary key stays PRIMARY KEY (id): every lookup by
-- id (the claim's, the completion's, the console's) touches one partition. A partition
-- covers one OUTBOX_PARTITION_SECONDS of ids: [uuid7_floor(t), uuid7_floor(t + width)).
-- Unlike the deliveries' (an identity moved forward at run time), these bounds come from the
-- emitting host's clock, so the manager (event_partitions_advance, called by
-- partitions_advance) keeps partitions made ahead up to `ahead + 1` widths (at least 60 s)
-- past now. Every id outside the partitions made (a host clock far ahead, or the time before
-- the first manager run) goes to events_default, which is never dropped: its rows are
-- deleted by the prune's events phase, as every event was before. A new partition takes the
-- rows of its range out of events_default in the transaction that attaches it (rare: only a
-- clock running ahead puts rows there).
--
-- Idempotency. `ON CONFLICT (idempotency_key)` needs a unique index of the table, and a
-- unique index of a partitioned table must contain its partition key. The keys live in
-- event_keys (idempotency_key PRIMARY KEY, event_id): emit inserts the key first (ON
-- CONFLICT DO NOTHING), then only the events whose key it won; the first event's id is
-- read from event_keys. The same wait as before on a key another transaction holds
-- uncommitted (the speculative insertion waits for it). A key is remembered as long as its
-- event is kept: it is deleted with it (partition drop or prune), as before. Only keyed emits
-- write it; events.idempotency_key is still stored (shown by `outbox events show`).
--
-- What blocks a drop (event_partition_status): the partition's ids reach past the
-- retention's cutoff (uuid7_floor(cutoff)), or a delivery still refers to one of its events
-- (one probe of each deliveries partition's event index: pending, dead kept for replay,
-- anything not yet dropped or pruned). A delivery is only ever inserted with its event, so an
-- event past the cutoff gains no new delivery, and a partition once droppable stays so.
--
-- UPGRADE IN PLACE (zero copy), as 0018: the existing table becomes the first partition,
-- events_legacy FOR VALUES FROM (MINVALUE) TO (B), B the first millisecond after both now
-- and every id stored; a CHECK (id < B) validated first proves the bound (one scan of the
-- table's heap), so ATTACH does not scan again, and its indexes are adopted (none rebuilt;
-- its unique index on idempotency_key stays on it, renamed). The keys it holds are copied
-- into event_keys (one index scan of that partial index). Locks: ACCESS EXCLUSIVE on events
-- until commit (the whole file is one transaction): emits wait for it, then run against the
-- new parent. Bound the wait as for 0004: PGOPTIONS='-c lock_timeout=3s' outbox migrate
-- (python -m bench.partition_upgrade measures the window). On a large table validate the
-- CHECK beforehand without blocking writes (VALIDATE takes SHARE UPDATE EXCLUSIVE), with a
-- bound B a few minutes ahead of now, in UUIDv7 form (the first 12 hex digits: the
-- millisecond since 1970; ids at or above it by the time the migration runs make it choose
-- its own bound and scan again):
--   SELECT (lpad(to_hex((extract(epoch FROM now() + interval '10 minutes') * 1000)::bigint),
--                12, '0') || '00000000000000000000')::uuid;                    -- B
--   ALTER TABLE <schema>.events ADD CONSTRAINT events_legacy_bound CHECK (id < 'B') NOT VALID;
--   ALTER TABLE <schema>.events VALIDATE CONSTRAINT events_legacy_bound;
-- and the migration uses that B without scanning (the converted table then also holds the
-- events emitted until B).

CREATE TABLE event_keys (
    idempotency_key text PRIMARY KEY,
    event_id        uuid NOT NULL
);
CREATE INDEX event_keys_event ON event_keys (event_id);
INSERT INTO event_keys (idempotency_key, event_id)
SELECT idempotency_key, id FROM events WHERE idempotency_key IS NOT NULL;

CREATE TABLE event_partitions (
    name       text PRIMARY KEY,
    lo         uuid,                          -- NULL: MINVALUE (the converted table)
    hi         uuid NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The smallest UUIDv7 of t's millisecond (every id made earlier sorts below it), and the
-- millisecond of a UUIDv7.
CREATE FUNCTION uuid7_floor(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (lpad(to_hex(greatest(floor(extract(epoch FROM t) * 1000), 0)::bigint), 12, '0')
            || '00000000000000000000')::uuid
$$;
CREATE FUNCTION uuid7_time(u uuid) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_timestamp(('x' || lpad(left(replace(u::text, '-', ''), 12), 16, '0'))::bit(64)
                        ::bigint / 1000.0)
$$;

DO $$
DECLARE
    bound uuid;
    last_id uuid := (SELECT e.id FROM events e ORDER BY e.id DESC LIMIT 1);
    pre uuid;
    r record;
BEGIN
    SELECT greatest(uuid7_floor(now() + interval '1 millisecond'),
                    COALESCE(uuid7_floor(uuid7_time(last_id) + interval '1 millisecond'),
                             uuid7_floor(now())))
      INTO bound;
    -- A bound validated beforehand (see above) is used as is when every id is below it.
    SELECT (regexp_match(pg_get_constraintdef(c.oid),
                         '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'))[1]::uuid
      INTO pre FROM pg_constraint c
     WHERE c.conrelid = 'events'::regclass AND c.conname = 'events_legacy_bound'
       AND c.convalidated;
    IF last_id IS NOT NULL AND bound <= last_id THEN
        -- an id that is no UUIDv7 of a real time (its first 48 bits near their end: the
        -- bound wrapped around): the converted table takes every id, new ones included,
        -- and is pruned row by row as before; no partition of events is ever made
        bound := NULL;
    ELSIF pre IS NOT NULL AND (last_id IS NULL OR pre > last_id) THEN
        bound := pre;
    ELSE
        ALTER TABLE events DROP CONSTRAINT IF EXISTS events_legacy_bound;
        EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_legacy_bound'
                       ' CHECK (id < %L)', bound);
    END IF;
    ALTER TABLE events RENAME TO events_legacy;
    FOR r IN SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
              WHERE x.indrelid = 'events_legacy'::regclass LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.relname,
                       regexp_replace(r.relname, '^events_', 'events_legacy_'));
    END LOOP;
    CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS) PARTITION BY RANGE (id);
    ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (id);
    -- its CHECK constraints (type, tenant), not the legacy bound
    FOR r IN SELECT c.conname, pg_get_constraintdef(c.oid) AS def FROM pg_constraint c
              WHERE c.conrelid = 'events_legacy'::regclass AND c.contype = 'c'
                AND c.conname <> 'events_legacy_bound' LOOP
        EXECUTE format('ALTER TABLE events ADD CONSTRAINT %I %s', r.conname, r.def);
    END LOOP;
    FOR r IN SELECT i.relname, pg_get_indexdef(x.indexrelid) AS def FROM pg_index x
               JOIN pg_class i ON i.oid = x.indexrelid
              WHERE x.indrelid = 'events_legacy'::regclass AND NOT x.indisunique LOOP
        EXECUTE regexp_replace(r.def, '^CREATE INDEX \S+ ON (ONLY )?\S+',
                               format('CREATE INDEX %I ON events',
                                      regexp_replace(r.relname, '^events_legacy_', 'events_')));
    END LOOP;
    EXECUTE format('ALTER TABLE events ATTACH PARTITION events_legacy'
                   ' FOR VALUES FROM (MINVALUE) TO (%s)',
                   COALESCE(quote_literal(bound), 'MAXVALUE'));
    CREATE TABLE events_default PARTITION OF events DEFAULT;
    -- its indexes named after the parent's (events_default_by_type, ...), as the others
    FOR r IN SELECT c.relname AS child, pc.relname AS parent FROM pg_index x
               JOIN pg_class c ON c.oid = x.indexrelid
               JOIN pg_inherits i ON i.inhrelid = x.indexrelid
               JOIN pg_class pc ON pc.oid = i.inhparent
              WHERE x.indrelid = 'events_default'::regclass
                AND c.relname <> 'events_default' || substr(pc.relname, length('events') + 1)
    LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', r.child,
                       'events_default' || substr(r.parent, length('events') + 1));
    END LOOP;
    INSERT INTO event_partitions (name, lo, hi)
    VALUES ('events_legacy', NULL, COALESCE(bound, 'ffffffff-ffff-ffff-ffff-ffffffffffff'));
    -- Whoever could use the old table can use the new parent; who inserted events (emit)
    -- inserts and reads keys, who deleted them (the worker's prune) deletes keys.
    FOR r IN SELECT a.privilege_type, a.grantee
               FROM aclexplode((SELECT relacl FROM pg_class
                                 WHERE oid = 'events_legacy'::regclass)) a
              WHERE a.grantee <> (SELECT relowner FROM pg_class
                                   WHERE oid = 'events_legacy'::regclass) LOOP
        EXECUTE format('GRANT %s ON events TO %s', r.privilege_type,
                       CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
        IF r.privilege_type IN ('INSERT', 'DELETE') THEN
            EXECUTE format('GRANT SELECT, %s ON event_keys TO %s', r.privilege_type,
                           CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                                ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
        END IF;
    END LOOP;
    FOR r IN SELECT a.grantee FROM pg_attribute t
              CROSS JOIN LATERAL aclexplode(t.attacl) a
              WHERE t.attrelid = 'events_legacy'::regclass AND t.attname = 'idempotency_key'
                AND a.privilege_type = 'SELECT' LOOP
        EXECUTE format('GRANT SELECT, INSERT ON event_keys TO %s',
                       CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(r.grantee)) END);
    END LOOP;
END
$$;

-- Makes the table of partition [p_lo, p_hi) with the parent's indexes, under names that say
-- which partition (events_p<ms>_pkey, ..._by_type), not attached yet; returns its name, NULL
-- when that range is taken. A new table: nothing waits for it.
CREATE FUNCTION event_partition_create(p_lo uuid, p_hi uuid) RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    n text := format('events_p%s', floor(extract(epoch FROM uuid7_time(p_lo)) * 1000)::bigint);
    r record;
BEGIN
    IF EXISTS (SELECT FROM event_partitions
                WHERE name = n OR hi > p_lo AND (lo IS NULL OR lo < p_hi)) THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS INCLUDING CONSTRAINTS,'
                   ' CHECK (id >= %L AND id < %L))', n, p_lo, p_hi);
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY (id)', n, n || '_pkey');
    FOR r IN SELECT i.relname, pg_get_indexdef(x.indexrelid) AS def FROM pg_index x
               JOIN pg_class i ON i.oid = x.indexrelid
              WHERE x.indrelid = 'events'::regclass AND NOT x.indisunique LOOP
        EXECUTE regexp_replace(r.def, '^CREATE INDEX \S+ ON (ONLY )?\S+',
                               format('CREATE INDEX %I ON %I',
                                      n || substr(r.relname, length('events') + 1), n));
    END LOOP;
    RETURN n;
END
$$;

-- Keeps partitions made from now (or the last one's end, if later) up to `ahead + 1`
-- widths (at least 60 s) past now, each one width wide. A gap (no manager for a while)
-- is covered by events_default. Returns how many it created. Called by partitions_advance,
-- under its advisory lock.
-- Locks: the tables are made first; then ACCESS EXCLUSIVE on events while they are
-- attached (each takes the rows of its range out of events_default, a small table, and
-- ATTACH checks it: milliseconds), so no emit is routing rows meanwhile: an INSERT or
-- COPY that had read the partitions before an ATTACH would send a row of the new range to
-- events_default and fail there (its partition constraint changed under it). The wait for
-- that lock is bounded at 200 ms (an emitting transaction holding events open; emits queue
-- behind the waiting lock meanwhile): then nothing is made this time (the subtransaction,
-- tables included, is undone), and the next call tries again: a range is made 60 s or
-- more ahead of need.
CREATE FUNCTION event_partitions_advance(p_width double precision, p_ahead integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    lo uuid;
    hi uuid;
    upto uuid := uuid7_floor(now() + make_interval(secs => greatest((p_ahead + 1) * p_width,
                                                                      60)));
    made text[] := '{}';
    los uuid[] := '{}';
    his uuid[] := '{}';
    n text;
    waited text := current_setting('lock_timeout');
BEGIN
    SELECT greatest((SELECT p.hi FROM event_partitions p ORDER BY p.hi DESC LIMIT 1),
                    uuid7_floor(now())) INTO lo;
    IF lo >= upto THEN
        RETURN 0;
    END IF;
    BEGIN
        WHILE lo < upto LOOP
            hi := uuid7_floor(uuid7_time(lo) + make_interval(secs => p_width));
            n := event_partition_create(lo, hi);
            IF n IS NOT NULL THEN
                made := made || n; los := los || lo; his := his || hi;
            END IF;
            lo := hi;
        END LOOP;
        PERFORM set_config('lock_timeout', '200', true);
        LOCK TABLE events IN ACCESS EXCLUSIVE MODE;
        PERFORM set_config('lock_timeout', waited, true);
        FOR i IN 1 .. cardinality(made) LOOP
            EXECUTE format('WITH moved AS (DELETE FROM events_default WHERE id >= %L'
                           ' AND id < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
                           los[i], his[i], made[i]);
            EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%L)'
                           ' TO (%L)', made[i], los[i], his[i]);
            INSERT INTO event_partitions (name, lo, hi) VALUES (made[i], los[i], his[i]);
        END LOOP;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;  -- the subtransaction is undone, lock_timeout with it
    END;
    RETURN cardinality(made);
END
$$;

-- What blocks the drop of partition p (NULL: nothing): its ids reach past the cutoff, or a
-- delivery refers to one of its events (one probe of each deliveries partition's event
-- index).
CREATE FUNCTION event_partition_blocker(p event_partitions, p_cutoff timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF p.hi > uuid7_floor(p_cutoff) THEN
        RETURN 'within retention';
    ELSIF EXISTS (SELECT FROM deliveries d WHERE d.event_id < p.hi
                     AND (p.lo IS NULL OR d.event_id >= p.lo)) THEN
        RETURN 'deliveries refer to its events';
    END IF;
    RETURN NULL;
END
$$;

-- Every partition of events with what blocks its drop (NULL: droppable). p_cutoff: the
-- retention's cutoff.
CREATE FUNCTION event_partition_status(p_cutoff timestamptz)
RETURNS TABLE (name text, lo uuid, hi uuid, rows_estimate bigint, bytes bigint,
               blocked_by text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    p event_partitions;
BEGIN
    FOR p IN SELECT * FROM event_partitions ORDER BY event_partitions.hi LOOP
        name := p.name; lo := p.lo; hi := p.hi;
        SELECT greatest(c.reltuples, 0)::bigint INTO rows_estimate FROM pg_class c
         WHERE c.oid = to_regclass(quote_ident(p.name));
        bytes := COALESCE(pg_total_relation_size(to_regclass(quote_ident(p.name))), 0);
        blocked_by := event_partition_blocker(p, p_cutoff);
        RETURN NEXT;
    END LOOP;
END
$$;

-- Drops one partition of events if nothing blocks it (re-checked under events' lock: emits
-- and claims wait for it, for milliseconds: one partition's check and catalog work), with
-- the idempotency keys of its events. The wait for the lock is bounded by
-- p_lock_timeout_ms (lock_not_available: nothing changed; the next call retries). Returns
-- whether it dropped.
CREATE FUNCTION event_partition_drop(p_name text, p_cutoff timestamptz,
                                     p_lock_timeout_ms integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    p event_partitions;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('outbox.partitions'), hashtext(current_schema()));
    SELECT * INTO p FROM event_partitions e WHERE e.name = p_name;
    IF p.name IS NULL OR event_partition_blocker(p, p_cutoff) IS NOT NULL THEN
        RETURN false;  -- checked before the lock too: a blocked one costs no wait
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true);
    LOCK TABLE events IN ACCESS EXCLUSIVE MODE;
    IF event_partition_blocker(p, p_cutoff) IS NOT NULL THEN
        RETURN false;
    END IF;
    DELETE FROM event_keys k WHERE k.event_id < p.hi AND (p.lo IS NULL OR k.event_id >= p.lo);
    EXECUTE format('ALTER TABLE events DETACH PARTITION %I', p.name);
    EXECUTE format('DROP TABLE %I', p.name);
    DELETE FROM event_partitions e WHERE e.name = p_name;
    RETURN true;
END
$$;

-- The manager's forward step now makes the events' partitions ahead too (0018's text, with
-- the call of event_partitions_advance at its end).
CREATE OR REPLACE FUNCTION partitions_advance(p_width double precision, p_ahead integer)
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
    RETURN made + event_partitions_advance(p_width, p_ahead);
END
$$;

DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['event_partition_create(uuid, uuid)',
                             'event_partitions_advance(double precision, integer)',
                             'event_partition_blocker(event_partitions, timestamptz)',
                             'event_partition_status(timestamptz)',
                             'event_partition_drop(text, timestamptz, integer)',
                             'partitions_advance(double precision, integer)'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_catalog',
                       current_schema(), f, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %I.%s FROM PUBLIC', current_schema(), f);
    END LOOP;
END
$$;

-- The SQL function emit: the same checks as migration 0020's, its statement now writing the
-- idempotency key to event_keys (above) before the event (the statement is
-- outbox._db.queries.emit.SQL_EMIT_STATEMENT verbatim: tests/unit/test_sql_emit_text.py).
-- CREATE OR REPLACE keeps its owner and grants but takes its SET clauses from the new text:
-- the search_path is pinned again below, and a payload cap raised with ALTER FUNCTION ...
-- SET outbox.max_payload_bytes is kept.
SELECT set_config('outbox.migration_payload_cap', COALESCE((
    SELECT substr(c, length('outbox.max_payload_bytes=') + 1)
      FROM pg_proc p, unnest(p.proconfig) c
     WHERE p.oid = 'emit(text, jsonb, text, text, text)'::regprocedure
       AND starts_with(c, 'outbox.max_payload_bytes=')), '1048576'), false);

CREATE OR REPLACE FUNCTION emit(type text, payload jsonb, key text DEFAULT NULL,
                                idempotency_key text DEFAULT NULL, tenant text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET outbox.max_payload_bytes = '1048576'
AS $emit$
#variable_conflict use_column
DECLARE
    v_id      uuid := uuid7();
    v_payload text := emit.payload::text;
    v_cap     bigint := COALESCE(current_setting('outbox.max_payload_bytes', true),
                                 '1048576')::bigint;
    v_ikey    text := CASE WHEN emit.tenant IS NULL OR emit.idempotency_key IS NULL
                           THEN emit.idempotency_key
                           ELSE emit.tenant || chr(31) || emit.idempotency_key END;
    v_got     uuid;
    v_mode    text := lower(COALESCE(NULLIF(current_setting('outbox.validate', true), ''),
                                     'strict'));
    v_known   boolean;
    v_schema  jsonb;
    v_problem text;
BEGIN
    PERFORM check_event(emit.type, emit.key, emit.idempotency_key, emit.tenant);
    IF v_payload IS NULL THEN
        RAISE EXCEPTION 'payload of % is SQL NULL: pass a jsonb value (''null''::jsonb '
            'for a JSON null)', quote_literal(emit.type) USING ERRCODE = '22023';
    END IF;
    IF octet_length(v_payload) > v_cap THEN
        RAISE EXCEPTION 'payload of % is % bytes, over the %-byte limit '
            '(outbox.max_payload_bytes)', quote_literal(emit.type), octet_length(v_payload),
            v_cap USING ERRCODE = '22023';
    END IF;
    IF v_mode NOT IN ('strict', 'warn', 'off') THEN
        RAISE EXCEPTION 'outbox.validate is %: use strict, warn or off', quote_literal(v_mode)
            USING ERRCODE = '22023';
    END IF;
    SELECT true, t.json_schema INTO v_known, v_schema FROM event_types t
     WHERE t.name = emit.type;
    IF v_known IS NULL AND COALESCE(NULLIF(current_setting('outbox.require_registered_types',
                                                           true), ''), 'false')::boolean THEN
        RAISE EXCEPTION 'event type % is not registered in the catalog '
            '(outbox.require_registered_types): register it with `outbox types add`',
            quote_literal(emit.type) USING ERRCODE = '22023';
    END IF;
    IF v_schema IS NOT NULL AND v_mode <> 'off' THEN
        v_problem := schema_problem(v_schema, emit.payload, '$', v_schema);
        IF v_problem IS NOT NULL AND v_mode = 'strict' THEN
            RAISE EXCEPTION 'payload of % does not match its schema %',
                quote_literal(emit.type), v_problem USING ERRCODE = '22023';
        ELSIF v_problem IS NOT NULL THEN
            RAISE WARNING 'payload of % does not match its schema % (outbox.validate = warn: '
                'emitted anyway)', quote_literal(emit.type), v_problem;
        END IF;
    END IF;
WITH k AS (
    INSERT INTO event_keys (idempotency_key, event_id)
    SELECT v_ikey, v_id WHERE v_ikey IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING event_id),
ins AS (
    INSERT INTO events (id, type, payload, key, idempotency_key, traceparent, tenant)
    SELECT v_id, emit.type, v_payload::json, emit.key, v_ikey, NULL, emit.tenant
     WHERE v_ikey IS NULL OR EXISTS (SELECT FROM k)
    RETURNING id, type, tenant, key),
fan AS (
    INSERT INTO deliveries (event_id, endpoint_id, key, state)
    SELECT ins.id, ep.id, CASE WHEN ep.ordered THEN ins.key END, CASE WHEN ep.ordered AND ins.key IS NOT NULL THEN 'fresh' ELSE 'pending' END
      FROM ins CROSS JOIN LATERAL (
            SELECT p.id, p.event_types, p.ordered, p.filter_path FROM endpoints p
             WHERE p.tenant = ins.tenant AND p.enabled
            UNION ALL
            SELECT p.id, p.event_types, p.ordered, p.filter_path FROM endpoints p
             WHERE ins.tenant IS NULL AND p.tenant IS NULL AND p.enabled AND NOT p.all_tenants
            UNION ALL
            SELECT p.id, p.event_types, p.ordered, p.filter_path FROM endpoints p
             WHERE p.all_tenants AND p.enabled) ep
     WHERE CASE WHEN (ep.event_types IS NULL OR ins.type = ANY (ep.event_types)
        OR EXISTS (SELECT FROM unnest(ep.event_types) f
                    WHERE f LIKE '%.*' AND starts_with(ins.type, left(f, -1)))) THEN CASE WHEN ep.filter_path IS NULL THEN true ELSE emit.payload @@ ep.filter_path END ELSE false END
 RETURNING 1),
wake AS (
SELECT pg_notify('outbox_wakeup_' || left(md5(('"' || current_schema() || '"')), 16), '') FROM (SELECT 1 FROM fan LIMIT 1) wrote
 WHERE NOT pg_try_advisory_xact_lock_shared(hashtext('outbox.wakeup'), hashtext(('"' || current_schema() || '"'))))
SELECT id FROM ins WHERE (SELECT count(*) FROM wake) >= 0 INTO v_got;
    IF v_got IS NULL THEN  -- the idempotency key exists: the first event's id
        SELECT k.event_id INTO v_got FROM event_keys k WHERE k.idempotency_key = v_ikey;
    END IF;
    RETURN v_got;
END
$emit$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION emit(text, jsonb, text, text, text) '
                   'SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION emit(text, jsonb, text, text, text) '
                   'SET outbox.max_payload_bytes = %L',
                   current_setting('outbox.migration_payload_cap'));
END
$$;
