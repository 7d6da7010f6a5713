-- outbox 0026: the claim's ordered placement keeps choosing its own plans.
--
-- The worker claims on a generic plan (delivery/queries/claim.py GENERIC_PLAN: SET LOCAL
-- plan_cache_mode = force_generic_plan in the claim's transaction). That setting reaches
-- the statements of the functions the claim calls, and ordered_place's UPDATE finds its
-- rows by `id = ANY (p_fresh)`: a custom plan prunes deliveries' partitions by those ids,
-- a generic plan cannot (PostgreSQL prunes `= ANY` only over a constant array) and would
-- probe every partition kept for every key placed. The function now sets plan_cache_mode
-- back to auto for its own statements (restored when it returns).
--
-- Locks: ALTER FUNCTION (catalog only).

ALTER FUNCTION ordered_place(uuid, text, bigint[]) SET plan_cache_mode = auto;
