-- outbox 0017: payload filters (docs/guides/filters.md; outbox/admin/filters.py).
--
-- endpoints.filter: the filter as registered (a JSON object, shown by `endpoints show`, the
-- API and the console); endpoints.filter_path: the same filter compiled at registration
-- into a jsonpath predicate (outbox.admin.filters.compile_filter), the one evaluator: emit's
-- routing (Python and SQL emit, outbox/_db/queries/emit.py) runs `payload::jsonb @@
-- filter_path` for an endpoint in scope whose type filter takes the event, and
-- `outbox endpoints test-filter` runs the same path on a sample. Both NULL: no filter.
-- Adding nullable columns rewrites nothing (no default); existing endpoints have no filter.
ALTER TABLE endpoints ADD COLUMN filter jsonb, ADD COLUMN filter_path jsonpath,
    ADD CONSTRAINT endpoints_filter_compiled CHECK ((filter IS NULL) = (filter_path IS NULL)),
    ADD CONSTRAINT endpoints_filter_object CHECK (jsonb_typeof(filter) = 'object'),
    ADD CONSTRAINT endpoints_filter_size CHECK (octet_length(filter::text) <= 8192
                                                AND octet_length(filter_path::text) <= 32768);

-- emit() routes with the filter (the statement is SQL_EMIT_STATEMENT verbatim,
-- tests/unit/test_sql_emit_text.py). CREATE OR REPLACE keeps its owner and grants but
-- takes its SET clauses from the new text: the search_path is pinned again below, and
-- a payload cap raised with ALTER FUNCTION ... SET outbox.max_payload_bytes is kept.
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
        SELECT e.id INTO v_got FROM events e WHERE e.idempotency_key = v_ikey;
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
