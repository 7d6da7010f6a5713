-- outbox 0027: slow start after an endpoint's first throttling cut.
--
-- A 429, 503 or timeout from an endpoint with no rate in force (no fixed limit, no
-- adaptive rate in the last 60 s) cuts its allowed rate from what the reporting process
-- saw, which is only its own share of the endpoint's traffic: with N worker processes
-- about 1/N of it, and less when the first 429 answers a burst's first requests. Growing
-- back linearly (7% of the cut rate a second) from such a cut took about a minute
-- (bench.flow gateway: 20/s after a first cut, 47/s on average over seconds 10-40 against
-- a receiver taking 100/s). After a first cut the rate now grows by `growth` times a
-- second (outbox.delivery.throttle SLOW_START), up to 10x the cut rate, until the next
-- cut, which is made from a rate in force and restarts the linear growth, as TCP's slow
-- start ends at its first loss.
--
--   growth   multiplicative growth per second since decreased_at (NULL: linear, by
--            increase_per_second)
--
-- The formula: outbox/_db/queries/flow.py adaptive_rate.
--
-- Locks: ALTER TABLE endpoint_flow (ACCESS EXCLUSIVE: a column without a default, whose
-- CHECK reads the table once, one narrow row per endpoint).

ALTER TABLE endpoint_flow ADD COLUMN IF NOT EXISTS growth double precision
    CHECK (growth > 1 AND growth <= 10);
