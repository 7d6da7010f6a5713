-- outbox 0019: a first-try success writes no delivery_attempts row (fewer WAL bytes per
-- delivery; bench/history_volume.py, figures in bench/README.md "WAL per event").
--
-- Where a delivery's WAL goes (pg_walinspect over a run of 1,000 events/s, two workers, 20 s
-- retention: bench/README.md has the table): the event row and its two index entries, the
-- delivery row written three times (emit, claim, completion: each update touches an indexed
-- column -- visible_at, or state in the partial indexes' predicates -- so none is HOT and
-- every version gets an entry in each index whose predicate it meets: 11 index entries per
-- delivery), the claim's row lock, and the attempt log: one more heap row, two more index
-- entries and, at retention, one more delete: ~14% of the whole. Most deliveries succeed on
-- their first attempt, and the delivery row already records that attempt's outcome (state
-- 'delivered', attempts 1, last_status, finished_at): the completion now writes the rest of
-- that attempt (its duration, worker and response excerpt) on the delivery row it updates
-- anyway (a few bytes more on a row version that is written regardless), and no attempt row.
--
-- Which attempts are left out of delivery_attempts: attempt 1, delivered, with no error or
-- error class noted (a delivered attempt that noted something, e.g. a response body cut
-- short, is logged as before), recorded by the completion that holds the lease (a fenced
-- result is logged as before). Every other attempt, replay, skip, poisoning and fencing is
-- logged exactly as before. A delivered row never changes again (replay and skip take
-- dead rows only), so the columns below are written once and read as they are.
--
-- Readers see every attempt through the view delivery_attempt_log: delivery_attempts'
-- rows plus, for each such delivery, the attempt rebuilt from the row (id NULL, attempt 1,
-- outcome 'delivered', status_code = last_status, created_at = finished_at). The console,
-- the API, `outbox events show`, `outbox dead show` read it (DELIVERY_ATTEMPTS,
-- ATTEMPTS_OF); a filter on delivery_id reaches both branches (the attempt log's
-- delivery index, the deliveries primary key). Pruning deletes both with the delivery.
--
-- Locks: ALTER TABLE deliveries takes ACCESS EXCLUSIVE until commit, catalog-only (three
-- columns without defaults: no rewrite, no scan). Bound the wait for it as for 0004:
--   PGOPTIONS='-c lock_timeout=3s' outbox migrate
-- Upgrade: a worker older than this migration keeps logging every attempt (its statements
-- name no new column), so old and new workers can run side by side during a rolling deploy.
--
-- Considered and left: a lower fillfactor on deliveries (50 instead of 85, measured with
-- bench/history_volume.py: no change in WAL per event -- as many row locks and updates to
-- another page); making the claim's update HOT by leasing in unindexed columns (not built:
-- rows in flight would stay at the head of the due indexes, and every claim would step
-- over all of them: its cost would follow the rows in flight, not the claim).

ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS success_ms double precision;
ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS success_worker text;
ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS success_excerpt text;

COMMENT ON COLUMN deliveries.success_ms IS
    'a first-try success not logged in delivery_attempts: its duration (NULL otherwise)';

CREATE OR REPLACE VIEW delivery_attempt_log AS
SELECT a.id, a.delivery_id, a.attempt, a.outcome, a.status_code, a.duration_ms,
       a.error_class, a.error, a.response_excerpt, a.worker, a.created_at
  FROM delivery_attempts a
UNION ALL
SELECT NULL::bigint, d.id, 1, 'delivered', d.last_status, d.success_ms, NULL::text,
       NULL::text, d.success_excerpt, d.success_worker, d.finished_at
  FROM deliveries d
 WHERE d.success_ms IS NOT NULL AND d.state = 'delivered';
