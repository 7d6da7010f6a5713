-- outbox 0020: the SQL emit checks payloads against the event catalog (docs/guides/sql.md,
-- docs/guides/catalog.md), as the Python emit does before any write.
--
-- emit(type, payload, ...) reads the type's row of event_types (one primary-key lookup) and,
-- when it has a JSON Schema, checks the payload with schema_problem() below before writing
-- anything. A payload that does not match raises SQLSTATE 22023 "payload of 'T' does not
-- match its schema at PATH: why", the Python emit's message, so a capture trigger's write
-- fails as an application's emit would. Two settings, read with current_setting() (SET in
-- a session, ALTER ROLE/DATABASE ... SET): outbox.validate strict (default) | warn (a
-- WARNING, emitted anyway) | off, as OUTBOX_VALIDATE; outbox.require_registered_types
-- (boolean, default false), as OUTBOX_REQUIRE_REGISTERED_TYPES.
--
-- schema_problem(schema, value, path, root) is a JSON Schema (draft 2020-12) check written
-- in PL/pgSQL: NULL, or "at PATH: why" for the first failing place it finds (the path
-- written as the Python emit writes it, $.lines[1].sku). Keywords checked: type, enum,
-- const; minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf; minLength,
-- maxLength, pattern (PostgreSQL's regular expressions); items, prefixItems, minItems,
-- maxItems, uniqueItems, contains, minContains, maxContains; properties, required,
-- additionalProperties, patternProperties, propertyNames, minProperties, maxProperties,
-- dependentRequired, dependentSchemas; allOf, anyOf, oneOf, not, if/then/else; $ref to a
-- place in the same schema ("#", "#/$defs/Name"). Annotations (title, description,
-- format, default, examples, discriminator ...) check nothing, as in the Python check. A
-- schema using unevaluatedProperties, unevaluatedItems, $dynamicRef or a $ref outside
-- itself is refused at its first use by a payload ("cannot be checked by the SQL emit")
-- rather than passed unchecked. It names pg_catalog functions only and pins no
-- search_path (emit's own pinned search_path finds it); EXECUTE is revoked from PUBLIC.
--
-- Locks and cost: functions only; nothing existing is rewritten. The SQL emit of a type
-- without a schema pays the lookup; docs/performance.md has the figures.

CREATE OR REPLACE FUNCTION schema_problem(s jsonb, v jsonb, path text, root jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
-- Each keyword's test is guarded by a plain "s ? keyword" (a simple expression, no query),
-- so a schema pays only for the keywords it uses; the value's text is built for messages.
DECLARE
    t    text := jsonb_typeof(v);
    kind text := jsonb_typeof(v);  -- 'integer' for a number without a fraction
    msg  text;
    k    text;
    x    jsonb;
    num  numeric;
    str  text;
BEGIN
    IF jsonb_typeof(s) = 'boolean' THEN
        RETURN CASE WHEN s = 'true' THEN NULL ELSE format(
            'at %s: false schema does not allow %s', path, left(v::text, 100)) END;
    ELSIF jsonb_typeof(s) IS DISTINCT FROM 'object' THEN
        RETURN NULL;
    END IF;
    IF s ?| ARRAY['unevaluatedProperties', 'unevaluatedItems', '$dynamicRef',
                  '$recursiveRef'] THEN
        k := (SELECT kw FROM unnest(ARRAY['unevaluatedProperties', 'unevaluatedItems',
                                          '$dynamicRef', '$recursiveRef']) kw
               WHERE s ? kw LIMIT 1);
        RETURN format('at %s: the keyword %s cannot be checked by the SQL emit', path, k);
    END IF;
    IF s ? '$ref' THEN
        k := s->>'$ref';
        x := CASE WHEN k = '#' THEN root
                  WHEN starts_with(k, '#/') AND strpos(k, '~') = 0 AND strpos(k, '%') = 0
                  THEN root #> string_to_array(substr(k, 3), '/') END;
        IF x IS NULL AND starts_with(k, '#/') THEN
            x := root #> ARRAY(
                SELECT replace(replace(p, '~1', '/'), '~0', '~')
                  FROM unnest(string_to_array(substr(k, 3), '/')) WITH ORDINALITY u(p, o)
                 ORDER BY o);
        END IF;
        IF x IS NULL THEN
            RETURN format('at %s: the $ref %s cannot be checked by the SQL emit (only '
                          'references inside the schema)', path, k);
        END IF;
        msg := schema_problem(x, v, path, root);
        IF msg IS NOT NULL THEN RETURN msg; END IF;
    END IF;
    IF t = 'number' THEN
        num := (v #>> '{}')::numeric;
        IF num = trunc(num) THEN kind := 'integer'; END IF;
    END IF;
    IF s ? 'type' THEN
        x := CASE WHEN jsonb_typeof(s->'type') = 'array' THEN s->'type'
                  ELSE jsonb_build_array(s->'type') END;
        IF NOT (x ? t OR x ? kind) THEN
            RETURN format('at %s: %s is not of type %s', path, left(v::text, 100),
                          (SELECT string_agg(e::text, ', ') FROM jsonb_array_elements(x) e));
        END IF;
    END IF;
    IF s ? 'enum' THEN
        IF NOT EXISTS (SELECT FROM jsonb_array_elements(s->'enum') e WHERE e = v) THEN
            RETURN format('at %s: %s is not one of %s', path, left(v::text, 100),
                          left((s->'enum')::text, 200));
        END IF;
    END IF;
    IF s ? 'const' AND v IS DISTINCT FROM s->'const' THEN
        RETURN format('at %s: %s was expected', path, left((s->'const')::text, 100));
    END IF;
    IF t = 'number' AND s ?| ARRAY['minimum', 'maximum', 'exclusiveMinimum',
                                   'exclusiveMaximum', 'multipleOf'] THEN
        msg := CASE
            WHEN num < (s->>'minimum')::numeric THEN
                format('%s is less than the minimum of %s', num, s->>'minimum')
            WHEN num > (s->>'maximum')::numeric THEN
                format('%s is greater than the maximum of %s', num, s->>'maximum')
            WHEN num <= (s->>'exclusiveMinimum')::numeric THEN
                format('%s is less than or equal to the minimum of %s', num,
                       s->>'exclusiveMinimum')
            WHEN num >= (s->>'exclusiveMaximum')::numeric THEN
                format('%s is greater than or equal to the maximum of %s', num,
                       s->>'exclusiveMaximum')
            WHEN num % (s->>'multipleOf')::numeric <> 0 THEN
                format('%s is not a multiple of %s', num, s->>'multipleOf') END;
    ELSIF t = 'string' AND s ?| ARRAY['minLength', 'maxLength', 'pattern'] THEN
        str := v #>> '{}';
        msg := CASE
            WHEN char_length(str) < (s->>'minLength')::int THEN
                format('%s is shorter than %s character(s)', left(v::text, 100),
                       s->>'minLength')
            WHEN char_length(str) > (s->>'maxLength')::int THEN
                format('%s is longer than %s character(s)', left(v::text, 100),
                       s->>'maxLength')
            WHEN NOT str ~ (s->>'pattern') THEN
                format('%s does not match %s', left(v::text, 100), to_jsonb(s->>'pattern'))
            END;
    ELSIF t = 'array' AND s ?| ARRAY['items', 'prefixItems', 'minItems', 'maxItems',
                                     'uniqueItems', 'contains'] THEN
        msg := array_problem(s, v, path, root);
        IF msg IS NOT NULL THEN RETURN msg; END IF;
    ELSIF t = 'object' AND s ?| ARRAY['properties', 'required', 'additionalProperties',
                                      'patternProperties', 'propertyNames', 'minProperties',
                                      'maxProperties', 'dependentRequired',
                                      'dependentSchemas'] THEN
        msg := object_problem(s, v, path, root);
        IF msg IS NOT NULL THEN RETURN msg; END IF;
    END IF;
    IF msg IS NOT NULL THEN
        RETURN format('at %s: %s', path, msg);
    ELSIF s ?| ARRAY['allOf', 'anyOf', 'oneOf', 'not', 'if'] THEN
        RETURN applicator_problem(s, v, path, root);
    END IF;
    RETURN NULL;
END
$$;

-- schema_problem's array keywords (v is an array).
CREATE OR REPLACE FUNCTION array_problem(s jsonb, v jsonb, path text, root jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    n      int := jsonb_array_length(v);
    prefix int := COALESCE(jsonb_array_length(s->'prefixItems'), 0);
    hits   int := 0;
    msg    text;
BEGIN
    IF n < (s->>'minItems')::int THEN
        RETURN format('at %s: %s has fewer than %s item(s)', path, left(v::text, 100),
                      s->>'minItems');
    ELSIF n > (s->>'maxItems')::int THEN
        RETURN format('at %s: %s has more than %s item(s)', path, left(v::text, 100),
                      s->>'maxItems');
    END IF;
    IF s->'uniqueItems' = 'true' THEN
        IF (SELECT count(DISTINCT e) FROM jsonb_array_elements(v) e) < n THEN
            RETURN format('at %s: %s has non-unique elements', path, left(v::text, 100));
        END IF;
    END IF;
    FOR i IN 0 .. n - 1 LOOP
        msg := CASE WHEN i < prefix THEN schema_problem(s->'prefixItems'->i, v->i,
                                                        path || '[' || i || ']', root)
                    WHEN s ? 'items' THEN schema_problem(s->'items', v->i,
                                                         path || '[' || i || ']', root) END;
        IF msg IS NOT NULL THEN RETURN msg; END IF;
        IF s ? 'contains' AND schema_problem(s->'contains', v->i, path, root) IS NULL THEN
            hits := hits + 1;
        END IF;
    END LOOP;
    IF s ? 'contains' AND hits < COALESCE((s->>'minContains')::int, 1) THEN
        RETURN format('at %s: %s contains %s item(s) valid under its "contains" schema, '
                      'fewer than %s', path, left(v::text, 100), hits,
                      COALESCE((s->>'minContains')::int, 1));
    ELSIF s ? 'contains' AND hits > (s->>'maxContains')::int THEN
        RETURN format('at %s: %s contains %s item(s) valid under its "contains" schema, '
                      'more than %s', path, left(v::text, 100), hits, s->>'maxContains');
    END IF;
    RETURN NULL;
END
$$;

-- schema_problem's object keywords (v is an object).
CREATE OR REPLACE FUNCTION object_problem(s jsonb, v jsonb, path text, root jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    k     text;
    x     jsonb;
    at    text;
    named boolean;
    msg   text;
    n     bigint;
BEGIN
    IF s ? 'required' THEN
        k := (SELECT r FROM jsonb_array_elements_text(s->'required') r
               WHERE NOT v ? r LIMIT 1);
        IF k IS NOT NULL THEN
            RETURN format('at %s: %s is a required property', path, to_jsonb(k));
        END IF;
    END IF;
    IF s ?| ARRAY['minProperties', 'maxProperties'] THEN
        n := (SELECT count(*) FROM jsonb_object_keys(v));
        IF n < (s->>'minProperties')::int THEN
            RETURN format('at %s: %s has fewer than %s properties', path,
                          left(v::text, 100), s->>'minProperties');
        ELSIF n > (s->>'maxProperties')::int THEN
            RETURN format('at %s: %s has more than %s properties', path,
                          left(v::text, 100), s->>'maxProperties');
        END IF;
    END IF;
    IF NOT s ?| ARRAY['properties', 'additionalProperties', 'patternProperties',
                      'propertyNames', 'dependentRequired', 'dependentSchemas'] THEN
        RETURN NULL;
    END IF;
    FOREACH k IN ARRAY ARRAY(SELECT jsonb_object_keys(v)) LOOP
        x := v->k;
        at := CASE WHEN k ~ '^[A-Za-z_][A-Za-z0-9_]*$' THEN path || '.' || k
                   ELSE path || '[' || to_jsonb(k)::text || ']' END;
        named := COALESCE(s->'properties' ? k, false);
        msg := CASE WHEN named THEN schema_problem(s->'properties'->k, x, at, root) END;
        IF msg IS NULL AND s ? 'patternProperties' THEN
            SELECT true, schema_problem(p.value, x, at, root) INTO named, msg
              FROM jsonb_each(s->'patternProperties') p
             WHERE k ~ p.key ORDER BY schema_problem(p.value, x, at, root) IS NULL LIMIT 1;
            named := COALESCE(named, false) OR COALESCE(s->'properties' ? k, false);
        END IF;
        IF msg IS NULL AND NOT named AND s->'additionalProperties' = 'false' THEN
            msg := format('at %s: additional property %s is not allowed', path, to_jsonb(k));
        ELSIF msg IS NULL AND NOT named AND s ? 'additionalProperties' THEN
            msg := schema_problem(s->'additionalProperties', x, at, root);
        END IF;
        IF msg IS NULL AND s ? 'propertyNames' THEN
            msg := schema_problem(s->'propertyNames', to_jsonb(k), at, root);
        END IF;
        IF msg IS NULL AND COALESCE(s->'dependentRequired' ? k, false) THEN
            msg := (SELECT format('at %s: %s is a dependency of %s', path, to_jsonb(r),
                                  to_jsonb(k))
                      FROM jsonb_array_elements_text(s->'dependentRequired'->k) r
                     WHERE NOT v ? r LIMIT 1);
        END IF;
        IF msg IS NULL AND s->'dependentSchemas' ? k THEN
            msg := schema_problem(s->'dependentSchemas'->k, v, path, root);
        END IF;
        IF msg IS NOT NULL THEN RETURN msg; END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- schema_problem's in-place applicators: allOf, anyOf, oneOf, not, if/then/else.
CREATE OR REPLACE FUNCTION applicator_problem(s jsonb, v jsonb, path text, root jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    msg  text;
    good int;
BEGIN
    IF s ? 'allOf' THEN
        msg := (SELECT m FROM jsonb_array_elements(s->'allOf') WITH ORDINALITY a(sub, o),
                    LATERAL schema_problem(a.sub, v, path, root) m
                 WHERE m IS NOT NULL ORDER BY o LIMIT 1);
        IF msg IS NOT NULL THEN RETURN msg; END IF;
    END IF;
    IF s ? 'anyOf' AND NOT EXISTS (SELECT FROM jsonb_array_elements(s->'anyOf') a(sub)
                                    WHERE schema_problem(a.sub, v, path, root) IS NULL) THEN
        RETURN format('at %s: %s is not valid under any of the schemas listed in the '
                      '''anyOf'' keyword', path, left(v::text, 100));
    END IF;
    IF s ? 'oneOf' THEN
        good := (SELECT count(*) FROM jsonb_array_elements(s->'oneOf') a(sub)
                  WHERE schema_problem(a.sub, v, path, root) IS NULL);
        IF good <> 1 THEN
            RETURN format('at %s: %s is valid under %s of the schemas listed in the '
                          '''oneOf'' keyword, not exactly one', path, left(v::text, 100),
                          good);
        END IF;
    END IF;
    IF s ? 'not' AND schema_problem(s->'not', v, path, root) IS NULL THEN
        RETURN format('at %s: %s should not be valid under %s', path, left(v::text, 100),
                      left((s->'not')::text, 100));
    END IF;
    IF s ? 'if' THEN
        IF schema_problem(s->'if', v, path, root) IS NULL THEN
            RETURN CASE WHEN s ? 'then' THEN schema_problem(s->'then', v, path, root) END;
        END IF;
        RETURN CASE WHEN s ? 'else' THEN schema_problem(s->'else', v, path, root) END;
    END IF;
    RETURN NULL;
END
$$;

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

REVOKE ALL ON FUNCTION schema_problem(jsonb, jsonb, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION array_problem(jsonb, jsonb, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION object_problem(jsonb, jsonb, text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION applicator_problem(jsonb, jsonb, text, jsonb) FROM PUBLIC;
