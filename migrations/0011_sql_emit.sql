-- outbox 0011: emit from SQL, and table capture (docs/guides/sql.md).
--
-- emit(type, payload jsonb, key, idempotency_key, tenant) RETURNS uuid: the Python emit as a
-- function, for any client of the database (psql, Go, Node, Ruby, a migration, a trigger).
-- It writes in the caller's transaction: the event commits or rolls back with it.
-- - Validation as outbox.Event: type syntax, key/idempotency_key/tenant syntax, payload at
--   most outbox.max_payload_bytes bytes of its stored text (set on the function below; the
--   default is OUTBOX_MAX_PAYLOAD_BYTES's default; raise it with ALTER FUNCTION ... SET).
--   A refused event raises SQLSTATE 22023 with the Python message; nothing is written.
-- - Routing, ordering and the wake-up: one statement built by outbox/_db/queries/emit.py
--   (SQL_EMIT_STATEMENT, pasted verbatim below; a test fails if they differ).
-- - Idempotency: the stored key is per tenant as Python stores it (tenant || U+001F || key),
--   so the two emits dedupe against each other; a repeat returns the first event's id.
-- - Ids: UUIDv7 (uuid7() below; PostgreSQL 15 has no uuidv7()).
-- - The payload is stored as PostgreSQL writes jsonb as text (keys sorted, ", " and ": "):
--   those are the bytes every delivery signs and posts.
--
-- Privileges: emit is SECURITY DEFINER (it runs as this migration's role, the tables'
-- owner) with search_path pinned to this schema then pg_temp, and EXECUTE is revoked from
-- PUBLIC: a role granted EXECUTE on emit alone (migrations/roles.sql grants it to the app
-- role) can write valid events and nothing else -- no INSERT on the tables, no read of
-- endpoints -- so validation cannot be bypassed. capture_row (the capture trigger) is
-- SECURITY DEFINER for the same reason: writers of a captured table need no grant.
-- capture_add/capture_remove run with the caller's rights (CREATE TRIGGER needs the
-- table's owner) and EXECUTE on them is not granted to anyone by default either.

-- A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then 12 bits of the sub-millisecond
-- fraction (as PostgreSQL 18's uuidv7(): ids of one session increase with the clock),
-- then random bits (variant 10 of gen_random_uuid's). Like check_event below it names
-- pg_catalog functions only (searched first whatever the search_path), so neither pins a
-- search_path: a SET clause costs each call more than its body (about 10 us).
CREATE OR REPLACE FUNCTION uuid7() RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    us  bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    -- milliseconds << 16 | version 7 << 12 | sub-millisecond fraction in 12 bits
    hi  bigint := (us / 1000) * 65536 + 28672 + (us % 1000) * 4096 / 1000;
BEGIN
    RETURN encode(overlay(uuid_send(gen_random_uuid()) PLACING int8send(hi) FROM 1 FOR 8),
                  'hex')::uuid;
END
$$;

-- The checks of outbox.Event (outbox/_emit/event.py), with its messages.
CREATE OR REPLACE FUNCTION check_event(type text, key text, idempotency_key text,
                                       tenant text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
#variable_conflict use_variable
DECLARE
    names text[] := ARRAY['key', 'idempotency_key', 'tenant'];
    vals  text[] := ARRAY[key, idempotency_key, tenant];
    caps  int[] := ARRAY[255, 255, 128];
BEGIN
    IF type IS NULL OR type = '' THEN
        RAISE EXCEPTION 'event type must be a non-empty string, e.g. ''invoice.paid'''
            USING ERRCODE = '22023';
    END IF;
    IF length(type) > 128 THEN
        RAISE EXCEPTION 'event type is % characters, over 128', length(type)
            USING ERRCODE = '22023';
    END IF;
    IF type !~ '^[A-Za-z0-9][A-Za-z0-9._:/-]*$' THEN
        RAISE EXCEPTION 'event type % is malformed: use letters, digits and . _ : / - '
            '(e.g. ''invoice.paid'')', quote_literal(type) USING ERRCODE = '22023';
    END IF;
    IF starts_with(type, 'outbox.') THEN
        RAISE EXCEPTION 'event type % is reserved: types starting with ''outbox.'' are the '
            'sender''s operational events', quote_literal(type) USING ERRCODE = '22023';
    END IF;
    FOR i IN 1..3 LOOP
        CONTINUE WHEN vals[i] IS NULL;
        IF vals[i] = '' THEN
            RAISE EXCEPTION '% must be a non-empty string or NULL', names[i]
                USING ERRCODE = '22023';
        END IF;
        IF length(vals[i]) > caps[i] THEN
            RAISE EXCEPTION '% is % characters, over %', names[i], length(vals[i]), caps[i]
                USING ERRCODE = '22023';
        END IF;
        IF vals[i] ~ '[\x01-\x1f\x7f]' THEN
            RAISE EXCEPTION '% contains control characters', names[i] USING ERRCODE = '22023';
        END IF;
    END LOOP;
END
$$;

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
WITH ins AS (
    INSERT INTO events (id, type, payload, key, idempotency_key, traceparent, tenant)
    VALUES (v_id, emit.type, v_payload::json, emit.key, v_ikey, NULL, emit.tenant)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, type, tenant, key),
fan AS (
    INSERT INTO deliveries (event_id, endpoint_id, key, state)
    SELECT ins.id, ep.id, CASE WHEN ep.ordered THEN ins.key END, CASE WHEN ep.ordered AND ins.key IS NOT NULL THEN 'fresh' ELSE 'pending' END
      FROM ins CROSS JOIN LATERAL (
            SELECT p.id, p.event_types, p.ordered FROM endpoints p
             WHERE p.tenant = ins.tenant AND p.enabled
            UNION ALL
            SELECT p.id, p.event_types, p.ordered FROM endpoints p
             WHERE ins.tenant IS NULL AND p.tenant IS NULL AND p.enabled AND NOT p.all_tenants
            UNION ALL
            SELECT p.id, p.event_types, p.ordered FROM endpoints p
             WHERE p.all_tenants AND p.enabled) ep
     WHERE (ep.event_types IS NULL OR ins.type = ANY (ep.event_types)
        OR EXISTS (SELECT FROM unnest(ep.event_types) f
                    WHERE f LIKE '%.*' AND starts_with(ins.type, left(f, -1))))
 RETURNING 1),
wake AS (
SELECT pg_notify('outbox_wakeup_' || left(md5(('"' || current_schema() || '"')), 16), '') FROM (SELECT 1 FROM fan LIMIT 1) wrote
 WHERE NOT pg_try_advisory_xact_lock_shared(hashtext('outbox.wakeup'), hashtext(('"' || current_schema() || '"'))))
SELECT id FROM ins WHERE (SELECT count(*) FROM wake) >= 0 INTO v_got;
    IF v_got IS NULL THEN  -- the idempotency key exists: the first event's id
        SELECT e.id INTO v_got FROM events e WHERE e.idempotency_key = v_ikey;
    END IF;
    RETURN v_got;
END
$emit$;

-- Table capture (outbox capture add; outbox/admin/capture.py): AFTER ROW triggers named
-- "<schema>_capture" (insert, delete) and "<schema>_capture_update" whose one argument is
-- the capture's configuration as JSON: {"type", "key", "tenant", "columns", "on"}
-- (key/tenant: a column name or null; columns: the captured columns, or null for all).
-- One event per changed row, emitted in the writing statement's transaction: payload
-- {"op", "table", "new", "old"} (new: null on delete, old: null on insert), only the
-- captured columns. An UPDATE that changes none of them emits nothing: the update
-- trigger's WHEN compares the captured columns' text forms (no function call for an
-- unchanged row), then capture_row compares their jsonb forms. key and tenant: the column's
-- value as text (NEW's, OLD's on delete). A refused event (e.g. a payload over the cap)
-- raises, and the writing statement fails.
CREATE OR REPLACE FUNCTION capture_row() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    cfg   jsonb := TG_ARGV[0]::jsonb;
    cols  text[];
    v_new jsonb;
    v_old jsonb;
    v_row jsonb;
BEGIN
    IF TG_OP <> 'DELETE' THEN v_new := to_jsonb(NEW); END IF;
    IF TG_OP <> 'INSERT' THEN v_old := to_jsonb(OLD); END IF;
    v_row := COALESCE(v_new, v_old);
    IF cfg->'columns' <> 'null' THEN
        cols := ARRAY(SELECT jsonb_array_elements_text(cfg->'columns'));
        v_new := (SELECT jsonb_object_agg(k, v) FROM jsonb_each(v_new) e(k, v)
                   WHERE k = ANY (cols));
        v_old := (SELECT jsonb_object_agg(k, v) FROM jsonb_each(v_old) e(k, v)
                   WHERE k = ANY (cols));
    END IF;
    IF TG_OP = 'UPDATE' AND v_new = v_old THEN
        RETURN NULL;
    END IF;
    PERFORM emit(cfg->>'type',
                 jsonb_build_object('op', lower(TG_OP),
                                    'table', TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME,
                                    'new', v_new, 'old', v_old),
                 key => v_row->>(cfg->>'key'), tenant => v_row->>(cfg->>'tenant'));
    RETURN NULL;
END
$$;

-- Drop a table's capture triggers; whether it had any.
CREATE OR REPLACE FUNCTION capture_remove(tbl regclass) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    trg   text;
    found boolean := false;
BEGIN
    FOR trg IN SELECT tgname FROM pg_trigger WHERE tgrelid = tbl
                  AND tgname IN (current_schema() || '_capture',
                                 current_schema() || '_capture_update') LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', trg, tbl);
        found := true;
    END LOOP;
    RETURN found;
END
$$;

-- Install (or replace) the capture of one table; checks everything first: an unknown
-- table, column or operation, or a bad type, raises and installs nothing.
CREATE OR REPLACE FUNCTION capture_add(tbl regclass, type text, key text DEFAULT NULL,
                                       tenant text DEFAULT NULL,
                                       ops text[] DEFAULT ARRAY['insert', 'update', 'delete'],
                                       columns text[] DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_variable
DECLARE
    missing text[];
    cfg     jsonb;
    others  text;
    changed text := 'OLD::text IS DISTINCT FROM NEW::text';
BEGIN
    PERFORM check_event(type, NULL, NULL, NULL);
    IF (SELECT relkind FROM pg_class WHERE oid = tbl) NOT IN ('r', 'p') THEN
        RAISE EXCEPTION '% is not a table', tbl USING ERRCODE = '42809';
    END IF;
    IF ops IS NULL OR cardinality(ops) = 0
       OR NOT ops <@ ARRAY['insert', 'update', 'delete'] THEN
        RAISE EXCEPTION 'capture operations must be among insert, update, delete, not %',
            COALESCE(array_to_string(ops, ','), 'none') USING ERRCODE = '22023';
    END IF;
    IF columns IS NOT NULL AND cardinality(columns) = 0 THEN
        RAISE EXCEPTION 'capture columns: give at least one, or NULL for all'
            USING ERRCODE = '22023';
    END IF;
    missing := ARRAY(SELECT c FROM unnest(COALESCE(columns, '{}') || key || tenant) c
                      WHERE c IS NOT NULL AND NOT EXISTS (
                            SELECT FROM pg_attribute a WHERE a.attrelid = tbl
                               AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped));
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'table % has no column %', tbl, array_to_string(missing, ', ')
            USING ERRCODE = '42703';
    END IF;
    cfg := jsonb_build_object('type', type, 'key', key, 'tenant', tenant,
                              'columns', to_jsonb(columns),
                              'on', to_jsonb(ARRAY(SELECT DISTINCT o FROM unnest(ops) o
                                                    ORDER BY o)));
    PERFORM capture_remove(tbl);
    others := (SELECT string_agg(upper(o), ' OR ') FROM unnest(ops) o WHERE o <> 'update');
    IF others IS NOT NULL THEN
        EXECUTE format('CREATE TRIGGER %I AFTER %s ON %s FOR EACH ROW '
                       'EXECUTE FUNCTION %I.capture_row(%L)', current_schema() || '_capture',
                       others, tbl, current_schema(), cfg::text);
    END IF;
    IF 'update' = ANY (ops) THEN
        IF columns IS NOT NULL THEN
            changed := format('ROW(%s)::text IS DISTINCT FROM ROW(%s)::text',
                              (SELECT string_agg('OLD.' || quote_ident(c), ', ')
                                 FROM unnest(columns) c),
                              (SELECT string_agg('NEW.' || quote_ident(c), ', ')
                                 FROM unnest(columns) c));
        END IF;
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s FOR EACH ROW WHEN (%s) '
                       'EXECUTE FUNCTION %I.capture_row(%L)',
                       current_schema() || '_capture_update', tbl, changed,
                       current_schema(), cfg::text);
    END IF;
    RETURN cfg::text;
END
$$;

-- The captured tables and their configuration (one row per table).
CREATE OR REPLACE VIEW captures AS
SELECT DISTINCT ON (t.tgrelid) t.tgrelid::regclass AS tbl,
       convert_from(substring(t.tgargs FROM 1 FOR length(t.tgargs) - 1), 'UTF8')::jsonb
           AS config
  FROM pg_trigger t
 WHERE t.tgfoid = 'capture_row'::regproc AND NOT t.tgisinternal
 ORDER BY t.tgrelid, t.tgname;

-- Fixed search_path: this schema, then pg_temp last (pg_catalog is searched first), on
-- every function that names a table or another function of the schema.
DO $$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY['emit(text, jsonb, text, text, text)', 'capture_row()',
                              'capture_add(regclass, text, text, text, text[], text[])',
                              'capture_remove(regclass)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', fn,
                       current_schema());
    END LOOP;
    FOREACH fn IN ARRAY ARRAY['uuid7()', 'check_event(text, text, text, text)',
                              'emit(text, jsonb, text, text, text)', 'capture_row()',
                              'capture_add(regclass, text, text, text, text[], text[])',
                              'capture_remove(regclass)'] LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
END
$$;
