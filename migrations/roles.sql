-- Least-privilege roles for outbox (not applied by `outbox migrate`: run it as a superuser
-- or the schema owner, once, after migrating):
--
--   psql -v schema=outbox -v app_role=app -v worker_role=outbox_worker \
--        -f migrations/roles.sql
--
-- The roles must exist (CREATE ROLE app LOGIN PASSWORD '...'). The migration role (the one
-- that ran `outbox migrate`) owns every table and alone can change the schema.
--
-- app:    emits. Inserts events and deliveries; reads only the endpoint columns the fan-out
--         needs (never secrets); reads back event ids for idempotency keys. Calls the SQL
--         function emit (migrations/0011_sql_emit.sql): SECURITY DEFINER, search_path
--         pinned, EXECUTE revoked from PUBLIC; a service that emits only from SQL needs
--         nothing but USAGE on the schema and EXECUTE on emit (no table privilege).
-- worker: delivers. Claims and completes deliveries, reads events and endpoints (secrets
--         included: it signs), logs attempts, disables an endpoint on 410, prunes, and
--         writes operational events (outbox.*) with their deliveries.

GRANT USAGE ON SCHEMA :"schema" TO :"app_role", :"worker_role";

-- app
GRANT INSERT ON :"schema".events, :"schema".deliveries TO :"app_role";
GRANT SELECT (id, type, tenant, key, idempotency_key) ON :"schema".events TO :"app_role";
-- idempotency keys (migrations/0025_partitioned_events.sql): emit writes a key before its
-- event and reads the first event's id back
GRANT SELECT, INSERT ON :"schema".event_keys TO :"app_role";
GRANT SELECT (id, tenant, all_tenants, enabled, event_types, ordered, filter_path)
    ON :"schema".endpoints TO :"app_role";
GRANT EXECUTE ON FUNCTION :"schema".emit(text, jsonb, text, text, text) TO :"app_role";
-- the event catalog emit checks payloads against (migrations/0012_event_types.sql)
GRANT SELECT ON :"schema".event_catalog TO :"app_role";
GRANT SELECT (name, json_schema, deprecated) ON :"schema".event_types TO :"app_role";

-- worker
GRANT SELECT, UPDATE, DELETE ON :"schema".deliveries TO :"worker_role";
GRANT SELECT, DELETE ON :"schema".events TO :"worker_role";
GRANT SELECT, DELETE ON :"schema".event_keys TO :"worker_role";
GRANT SELECT ON :"schema".endpoints TO :"worker_role";
GRANT UPDATE (enabled, disabled_reason, updated_at, failure_streak, failing_since)
    ON :"schema".endpoints TO :"worker_role";
-- operational events (migrations/0013_operational_events.sql): the completion writes them
-- through op_insert (outbox.* types only: no INSERT on events) and fans them out
GRANT INSERT ON :"schema".deliveries TO :"worker_role";
GRANT EXECUTE ON FUNCTION :"schema".op_insert(json) TO :"worker_role";
GRANT SELECT, INSERT, DELETE ON :"schema".delivery_attempts TO :"worker_role";
-- flow control: the claim takes send tokens, throttling lowers the rate or pauses
-- (migrations/0008_flow_control.sql)
GRANT SELECT, INSERT, UPDATE ON :"schema".endpoint_flow TO :"worker_role";
-- ordered endpoints: the claim places fresh deliveries, the completion promotes the next
-- (migrations/0005_ordered.sql)
-- (the claim calls ordered_place, repair and `dead skip` ordered_advance; both call the
-- two helpers, which run with the caller's rights too)
GRANT EXECUTE ON FUNCTION :"schema".ordered_place(uuid, text, bigint[]),
    :"schema".ordered_advance(uuid, text), :"schema".ordered_next(uuid, text),
    :"schema".ordered_promote_if_headless(uuid, text),
    :"schema".ordered_check_isolation() TO :"worker_role";
-- the partition manager (migrations/0018_partitioned_history.sql): its functions run with
-- the owner's rights (CREATE, ATTACH, DETACH and DROP of partitions need them) and drop a
-- partition only when nothing in it must survive; the worker calls them, nobody else.
GRANT EXECUTE ON FUNCTION :"schema".partitions_advance(double precision, integer),
    :"schema".claim_floor(),
    :"schema".partition_status(timestamptz, timestamptz),
    :"schema".partition_drop(bigint, timestamptz, timestamptz, integer),
    :"schema".event_partition_status(timestamptz),
    :"schema".event_partition_drop(text, timestamptz, integer) TO :"worker_role";
