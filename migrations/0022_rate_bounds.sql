-- outbox 0022: the database bounds an endpoint's rate limits as the library, the CLI and the
-- API do (outbox.admin.endpoint_options.RATE_MAX): rate_limit and tenant_rate_limit finite,
-- above 0 and at most 1,000,000 requests per second, rate_burst 1 to 1,000,000.
--
-- 0008 checked only `> 0`, which PostgreSQL's NaN and Infinity both pass (NaN sorts above
-- every number). A rate limit of NaN or Infinity written by hand then made every listing
-- of endpoints fail for every tenant: JSON has no such number, so GET /api/endpoints
-- answered 422 whatever the tenant or page.
--
-- Existing rows out of bounds are first REPAIRED and REPORTED, never refused, as in 0007:
-- the value becomes NULL (rate_limit, tenant_rate_limit: no fixed limit, which is what an
-- Infinity or a rate of 1e300 per second meant; rate_burst: one second's worth), and each
-- repair is a row of endpoint_repairs (endpoint, field, the old value as text):
--     SELECT * FROM <schema>.endpoint_repairs ORDER BY id;
--
-- Locks and cost: one scan and update of endpoints (a small table) under the migration's
-- transaction; the CHECK constraints are validated in that same scan. Deliveries, events
-- and endpoint_flow are not touched.

INSERT INTO endpoint_repairs (endpoint_id, field, old_value)
SELECT id, f.field, f.old
  FROM endpoints
 CROSS JOIN LATERAL (VALUES
     ('rate_limit', rate_limit::text, rate_limit > 0 AND rate_limit <= 1000000),
     ('rate_burst', rate_burst::text, rate_burst BETWEEN 1 AND 1000000),
     ('tenant_rate_limit', tenant_rate_limit::text,
      tenant_rate_limit > 0 AND tenant_rate_limit <= 1000000)) f(field, old, ok)
 WHERE NOT f.ok
 ORDER BY id, f.field;

UPDATE endpoints
   SET rate_limit = CASE WHEN rate_limit > 0 AND rate_limit <= 1000000 THEN rate_limit END,
       rate_burst = CASE WHEN rate_burst BETWEEN 1 AND 1000000 THEN rate_burst END,
       tenant_rate_limit = CASE WHEN tenant_rate_limit > 0 AND tenant_rate_limit <= 1000000
                                THEN tenant_rate_limit END,
       updated_at = now()
 WHERE NOT (rate_limit > 0 AND rate_limit <= 1000000)
    OR NOT (rate_burst BETWEEN 1 AND 1000000)
    OR NOT (tenant_rate_limit > 0 AND tenant_rate_limit <= 1000000);

ALTER TABLE endpoints
    ADD CONSTRAINT endpoints_rate_limit_bounds
        CHECK (rate_limit > 0 AND rate_limit <= 1000000),
    ADD CONSTRAINT endpoints_rate_burst_bounds CHECK (rate_burst BETWEEN 1 AND 1000000),
    ADD CONSTRAINT endpoints_tenant_rate_limit_bounds
        CHECK (tenant_rate_limit > 0 AND tenant_rate_limit <= 1000000);
