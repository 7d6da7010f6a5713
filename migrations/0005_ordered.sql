-- outbox 0005: ordered delivery per key (endpoints.ordered; README "Ordered delivery").
--
-- For an ordered endpoint, emit writes the deliveries of events with a key in state
-- 'fresh' with the event's key copied onto the delivery; a worker places each one
-- (ordered_place, below): the key's oldest undelivered delivery becomes 'pending' (its
-- head, claimed like any other row), the rest 'waiting'. Completing a head as delivered
-- promotes the next one in the same statement (delivery/queries.py COMPLETE). A dead head
-- keeps its key (it blocks the key) until it is replayed, or skipped (`outbox dead skip`:
-- its key is cleared). Neither
-- 'fresh' nor 'waiting' rows are in the claim's indexes, so the claim never sees them.
--
-- Locks, in order (the whole file is one transaction, so each lock is held until commit):
-- 1. ALTER TABLE deliveries and endpoints: ACCESS EXCLUSIVE, catalog-only (a column without
--    a default, a boolean with a constant default: no rewrite; the state CHECK is replaced
--    by one NOT VALID, so no scan: every row written from now on is checked, and every
--    existing row satisfies it).
-- 2. The three partial indexes on deliveries.key: each build scans deliveries once while
--    the ALTER's lock is held, which blocks every query on deliveries (reads too) for the
--    duration. No existing row is in them (key is a new column), but the scan still runs.
--    On a large, busy table add the column and build them beforehand without blocking,
--    then migrate (IF NOT EXISTS makes this file skip both):
--      ALTER TABLE <schema>.deliveries ADD COLUMN IF NOT EXISTS key text;
--      CREATE INDEX CONCURRENTLY deliveries_fresh ON <schema>.deliveries (id)
--          WHERE state = 'fresh';
--      CREATE INDEX CONCURRENTLY deliveries_queued_by_key
--          ON <schema>.deliveries (endpoint_id, key, id) WHERE state IN ('fresh', 'waiting');
--      CREATE UNIQUE INDEX CONCURRENTLY deliveries_key_head ON <schema>.deliveries
--          (endpoint_id, key) WHERE key IS NOT NULL AND state IN ('pending', 'dead');
--    Bound the wait for the ALTERs' locks as for 0004:
--      PGOPTIONS='-c lock_timeout=3s' outbox migrate

ALTER TABLE endpoints ADD COLUMN IF NOT EXISTS ordered boolean NOT NULL DEFAULT false;

-- The ordering key of the event, on deliveries to ordered endpoints only (NULL elsewhere,
-- and on a dead head once it is skipped: it no longer holds its key).
ALTER TABLE deliveries ADD COLUMN IF NOT EXISTS key text;

ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_state_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'delivered', 'dead', 'fresh', 'waiting')) NOT VALID;

-- Fresh rows, oldest first: what the claim hands to ordered_place.
CREATE INDEX IF NOT EXISTS deliveries_fresh ON deliveries (id) WHERE state = 'fresh';
-- A key's queue, in order: the next one to promote is its first entry.
CREATE INDEX IF NOT EXISTS deliveries_queued_by_key
    ON deliveries (endpoint_id, key, id) WHERE state IN ('fresh', 'waiting');
-- A key's head: at most one pending or dead delivery per (endpoint, key) holds the key.
-- Unique, as a guard: a second head fails its statement rather than break the order.
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_key_head
    ON deliveries (endpoint_id, key) WHERE key IS NOT NULL AND state IN ('pending', 'dead');

-- Every function below relies on READ COMMITTED: each statement after the key's advisory
-- lock takes a new snapshot, so it sees what the lock's previous holder committed. Under
-- REPEATABLE READ or SERIALIZABLE the transaction's snapshot is older than the lock and a
-- key could be left with queued rows and no head, or get two. They refuse to run there
-- (the worker pins READ COMMITTED on its connections; `outbox dead skip` runs in its own
-- READ COMMITTED transaction or refuses).
-- Lock order: a caller taking several keys in one statement takes them ordered by the
-- lock's own key, (hashtext('outbox.ordered:' || endpoint), hashtext(key)): two keys whose
-- hashes collide share a lock, and an order by (endpoint, key) could take two locks in
-- opposite orders in two transactions (a deadlock).
CREATE OR REPLACE FUNCTION ordered_check_isolation() RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'outbox ordered delivery needs READ COMMITTED, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = '0A000',  -- feature_not_supported
                  HINT = 'run it in a READ COMMITTED transaction (SET default_transaction_'
                         'isolation = ''read committed'' on the connection)';
    END IF;
END
$$;

-- A key's head: does a delivery hold the key (pending or dead)? One probe of the unique
-- index deliveries_key_head. Else its oldest queued delivery (the first entry of
-- deliveries_queued_by_key) becomes the head: 'pending', due now, or parked at infinity if
-- the endpoint is disabled. Returns the id promoted, or NULL. Caller holds the key's lock.
CREATE OR REPLACE FUNCTION ordered_promote_if_headless(p_endpoint uuid, p_key text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    next_id bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM deliveries
                WHERE endpoint_id = p_endpoint AND key = p_key AND key IS NOT NULL
                  AND state IN ('pending', 'dead')) THEN
        RETURN NULL;
    END IF;
    SELECT id INTO next_id FROM deliveries
     WHERE endpoint_id = p_endpoint AND key = p_key AND state IN ('fresh', 'waiting')
     ORDER BY endpoint_id, key, id LIMIT 1;
    IF next_id IS NOT NULL THEN
        UPDATE deliveries
           SET state = 'pending',
               visible_at = CASE WHEN (SELECT enabled FROM endpoints WHERE id = p_endpoint)
                                 THEN now() ELSE 'infinity' END
         WHERE id = next_id;
    END IF;
    RETURN next_id;
END
$$;

-- The claim's placement of one (endpoint, key): p_fresh are the key's 'fresh' deliveries
-- the claim picked (its oldest fresh rows, a bounded number). If no delivery holds the key,
-- its oldest queued one becomes its head (above); each of p_fresh still 'fresh' becomes
-- 'waiting', by primary key. Other fresh rows of the key stay fresh for a later claim:
-- the cost follows p_fresh, never the key's backlog. Returns the id promoted, or NULL.
--
-- The key's lock is tried, not waited for (pg_try_advisory_xact_lock): a key busy in
-- another transaction (a completion promoting, another claim, a skip) is passed over and
-- its rows stay fresh; the worker's NEXT_DUE and ANY_DUE count fresh rows as due, so a
-- later claim places them. Claims never queue behind each other on a key.
-- Once locked (held until the caller commits), each statement runs with a new snapshot
-- taken after the lock (plpgsql, VOLATILE, READ COMMITTED), so it sees every earlier
-- holder's commit and every committed emit: a key is never left with queued rows and no
-- head, and never gets two. Rows still uncommitted (an open emitting transaction) are
-- 'fresh' when they commit, and a claim places them then.
-- Neither this nor ordered_next ever waits for a row lock the other holds while holding
-- the key's lock (no deadlock): this one promotes only while no head exists, the
-- completion's head is a head until it commits, and fresh rows are settled with SKIP LOCKED.
CREATE OR REPLACE FUNCTION ordered_place(p_endpoint uuid, p_key text, p_fresh bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    next_id bigint;
BEGIN
    PERFORM ordered_check_isolation();
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox.ordered:' || p_endpoint::text),
                                     hashtext(p_key)) THEN
        RETURN NULL;  -- busy: its rows stay fresh, a later claim places them
    END IF;
    next_id := ordered_promote_if_headless(p_endpoint, p_key);
    UPDATE deliveries SET state = 'waiting'
     WHERE id IN (SELECT id FROM deliveries
                   WHERE id = ANY (p_fresh) AND state = 'fresh'
                     AND endpoint_id = p_endpoint AND key = p_key
                     FOR UPDATE SKIP LOCKED);
    RETURN next_id;
END
$$;

-- Give a key without a head its head: waits for the key's lock, then as ordered_place
-- without settling fresh rows (a claim does that). Called by `outbox dead skip` (the key
-- it released) and by the worker's repair pass (REPAIR_HEADLESS: keys with queued rows
-- and no head, e.g. left by a worker older than this migration). Returns the id promoted,
-- or NULL (a head exists, or nothing is queued).
CREATE OR REPLACE FUNCTION ordered_advance(p_endpoint uuid, p_key text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM ordered_check_isolation();
    PERFORM pg_advisory_xact_lock(hashtext('outbox.ordered:' || p_endpoint::text),
                                  hashtext(p_key));
    RETURN ordered_promote_if_headless(p_endpoint, p_key);
END
$$;

-- The worker's completion (delivery/queries.py COMPLETE) calls this for each key whose head
-- it has just recorded delivered, in the same statement: the key's oldest queued delivery
-- (fresh or waiting) becomes its head ('pending', due now, or parked at infinity if the
-- endpoint is disabled). Returns the id promoted, or NULL.
-- Why a function with the key's lock, not a subquery of COMPLETE: a subquery reads the
-- statement's snapshot, taken before COMPLETE began; a row committed after that and
-- settled 'waiting' by ordered_place (which saw the head still pending) would be seen by
-- neither, and its key would wait for ever. Here the lock makes ordered_place and this
-- take turns, and the UPDATE below reads a snapshot taken after the lock, so whichever
-- runs second sees what the first did. No head check is needed: the caller's head holds
-- the key until the caller commits, so no other head can have been made meanwhile.
CREATE OR REPLACE FUNCTION ordered_next(p_endpoint uuid, p_key text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
DECLARE
    next_id bigint;
BEGIN
    PERFORM ordered_check_isolation();
    PERFORM pg_advisory_xact_lock(hashtext('outbox.ordered:' || p_endpoint::text),
                                  hashtext(p_key));
    UPDATE deliveries d
       SET state = 'pending',
           visible_at = CASE WHEN (SELECT enabled FROM endpoints WHERE id = p_endpoint)
                             THEN now() ELSE 'infinity' END
     WHERE d.id = (SELECT q.id FROM deliveries q
                    WHERE q.endpoint_id = p_endpoint AND q.key = p_key
                      AND q.state IN ('fresh', 'waiting')
                    ORDER BY q.endpoint_id, q.key, q.id LIMIT 1)
    RETURNING d.id INTO next_id;
    RETURN next_id;
END
$$;

-- The functions resolve names in this schema, then pg_catalog, and nowhere else (not in
-- `public`, which the migration's search_path also holds): an object someone creates in
-- another schema never shadows one they use.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['ordered_check_isolation()',
                             'ordered_promote_if_headless(uuid, text)',
                             'ordered_place(uuid, text, bigint[])',
                             'ordered_advance(uuid, text)', 'ordered_next(uuid, text)'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_catalog',
                       current_schema(), f, current_schema());
    END LOOP;
END
$$;
