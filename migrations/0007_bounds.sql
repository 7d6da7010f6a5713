-- outbox 0007: the database enforces the bounds of every endpoint option and custom header
-- that outbox.endpoint_options enforces (the one definition the library, CLI and API
-- share), so no row written by hand, by an older version or by a script bypassing the
-- library can make the worker compute a time it cannot store or send a request that
-- cannot be sent.
--
-- Existing rows out of bounds are first REPAIRED and REPORTED, never refused (a migration
-- that fails on data leaves the operator stuck between two versions):
--   * a number out of its range (NaN, Infinity, 1e300, 0, max_in_flight 2147483647...) is
--     set to NULL: the endpoint falls back to the worker's setting for it;
--   * headers that are not a JSON object become {}; invalid entries (names that are not
--     RFC 7230 tokens or are reserved, values that are not printable ASCII strings, over
--     4,096 characters) are dropped; past 32 entries every entry is dropped;
--   * each repair is a row of endpoint_repairs (endpoint, field, the old value as text):
--       SELECT * FROM <schema>.endpoint_repairs ORDER BY id;
--
-- Locks and cost: one scan and update of endpoints (a small table) under the migration's
-- transaction; the CHECK constraints are validated in that same scan. Deliveries and
-- events are not touched.

CREATE TABLE endpoint_repairs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id uuid NOT NULL,
    field       text NOT NULL,
    old_value   text,
    repaired_at timestamptz NOT NULL DEFAULT now()
);

-- The header rules of outbox.endpoint_options.check_headers, as one immutable function
-- (no reference to another function of this schema: a CHECK runs under the writer's
-- search_path). Keep the two in step: tests/integration/test_bounds.py checks that every
-- header the library refuses is refused here too.
CREATE FUNCTION endpoint_headers_valid(headers jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN jsonb_typeof(headers) IS DISTINCT FROM 'object' THEN false ELSE (
    SELECT count(*) <= 32 AND COALESCE(bool_and(
               jsonb_typeof(e.value) = 'string'
           AND e.key ~ '^[A-Za-z0-9!#$%&''*+.^_`|~-]{1,128}$'
           AND lower(e.key) NOT LIKE 'webhook-%'
           AND lower(e.key) <> ALL (ARRAY[
                   'host', 'content-length', 'content-type', 'content-encoding',
                   'transfer-encoding', 'connection', 'keep-alive', 'proxy-connection', 'te',
                   'trailer', 'upgrade', 'expect', 'proxy-authorization', 'proxy-authenticate',
                   'idempotency-key', 'user-agent', 'traceparent', 'tracestate',
                   'accept-encoding'])
           AND (e.value #>> '{}') ~ '^[\x20-\x7e\t]*$'
           AND length(e.value #>> '{}') <= 4096), true)
      FROM jsonb_each(headers) e) END
$$;

-- Report, then repair. (NaN BETWEEN a AND b is false in PostgreSQL: NaN sorts above every
-- number, so it is caught like Infinity.)
INSERT INTO endpoint_repairs (endpoint_id, field, old_value)
SELECT id, f.field, f.old
  FROM endpoints
 CROSS JOIN LATERAL (VALUES
     ('max_attempts', max_attempts::text, max_attempts BETWEEN 1 AND 100),
     ('retry_base_seconds', retry_base_seconds::text,
      retry_base_seconds BETWEEN 0.001 AND 86400),
     ('retry_cap_seconds', retry_cap_seconds::text,
      retry_cap_seconds BETWEEN 0.001 AND 2592000),
     ('timeout_seconds', timeout_seconds::text, timeout_seconds BETWEEN 0.001 AND 3600),
     ('max_in_flight', max_in_flight::text, max_in_flight BETWEEN 1 AND 10000),
     ('headers', headers::text, endpoint_headers_valid(headers))) f(field, old, ok)
 WHERE NOT f.ok
 ORDER BY id, f.field;

UPDATE endpoints
   SET max_attempts = CASE WHEN max_attempts BETWEEN 1 AND 100 THEN max_attempts END,
       retry_base_seconds = CASE WHEN retry_base_seconds BETWEEN 0.001 AND 86400
                                 THEN retry_base_seconds END,
       retry_cap_seconds = CASE WHEN retry_cap_seconds BETWEEN 0.001 AND 2592000
                                THEN retry_cap_seconds END,
       timeout_seconds = CASE WHEN timeout_seconds BETWEEN 0.001 AND 3600
                              THEN timeout_seconds END,
       max_in_flight = CASE WHEN max_in_flight BETWEEN 1 AND 10000 THEN max_in_flight END,
       headers = CASE
           WHEN endpoint_headers_valid(headers) THEN headers
           WHEN jsonb_typeof(headers) IS DISTINCT FROM 'object' THEN '{}'::jsonb
           ELSE COALESCE((SELECT jsonb_object_agg(e.key, e.value)
                            FROM jsonb_each(headers) e
                           WHERE endpoint_headers_valid(jsonb_build_object(e.key, e.value))
                          HAVING count(*) <= 32), '{}'::jsonb) END,
       updated_at = now()
 WHERE id IN (SELECT endpoint_id FROM endpoint_repairs);

ALTER TABLE endpoints
    ADD CONSTRAINT endpoints_max_attempts_bounds CHECK (max_attempts BETWEEN 1 AND 100),
    ADD CONSTRAINT endpoints_retry_base_bounds
        CHECK (retry_base_seconds BETWEEN 0.001 AND 86400),
    ADD CONSTRAINT endpoints_retry_cap_bounds
        CHECK (retry_cap_seconds BETWEEN 0.001 AND 2592000),
    ADD CONSTRAINT endpoints_timeout_bounds CHECK (timeout_seconds BETWEEN 0.001 AND 3600),
    ADD CONSTRAINT endpoints_max_in_flight_bounds CHECK (max_in_flight BETWEEN 1 AND 10000),
    ADD CONSTRAINT endpoints_headers_valid CHECK (endpoint_headers_valid(headers));

-- Web sessions ended before their cookie expires (`POST /logout`). A session cookie is
-- signed, not stored, so it cannot be recalled: every cookie-authenticated request looks
-- its session id up here (one primary-key probe) and is refused if found. A row is useless
-- once the cookie it names has expired; each logout deletes those.
CREATE TABLE web_sessions_revoked (
    sid        text PRIMARY KEY CHECK (length(sid) BETWEEN 16 AND 64),
    expires_at timestamptz NOT NULL
);
