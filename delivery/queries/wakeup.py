"""Whether work is due (the drain's exit test, the next due time), and the idle worker's
wake-up on its own listening connection (LISTEN, the session probe, the sentinel's arming,
disarming and hand-over)."""

from __future__ import annotations

from outbox._db import queries as core

# Is anything due now? (drain mode's exit test) Ordered endpoints: fresh rows (not yet
# placed by a claim) count, the next claim places them; so does a leased head with
# deliveries queued behind it: its completion makes the next one due (a drain must not
# stop between the two, e.g. while that completion is still being recorded). The heads
# are read through deliveries_key_head: the cost follows the ordered keys in progress.
ANY_DUE = """
SELECT EXISTS (SELECT 1 FROM {schema}.deliveries
                WHERE state = 'pending' AND visible_at <= now())
    OR EXISTS (SELECT 1 FROM {schema}.deliveries WHERE state = 'fresh')
    OR EXISTS (SELECT 1 FROM {schema}.deliveries h
                WHERE h.key IS NOT NULL AND h.state = 'pending' AND h.lease_token IS NOT NULL
                  AND EXISTS (SELECT 1 FROM {schema}.deliveries w
                               WHERE w.endpoint_id = h.endpoint_id AND w.key = h.key
                                 AND w.state IN ('fresh', 'waiting')))
"""

# --- wake-up (outbox.delivery.wakeup; the emitting side is outbox._db.queries.WAKE*) ---------
# All on the worker's own listening connection (a direct session: LISTEN and session
# advisory locks do not survive a transaction-mode pooler).
# LISTEN on the schema's channel (a DO block: LISTEN takes no parameter, and the channel
# name is computed in SQL, once, by outbox._db.queries.WAKE_CHANNEL).
WAKE_LISTEN = "DO $$ BEGIN EXECUTE format('LISTEN %I', " + core.WAKE_CHANNEL + "); END $$"
# What the server sees of this connection (outbox.delivery.session.direct: is it a
# session of our own, or does a pooler sit between?).
SESSION_PROBE = ("SELECT host(inet_client_addr()), inet_client_port(), inet_server_port(),"
                 " current_setting('port')")
# How long arming may wait for emitting transactions that skipped the NOTIFY to end.
WAKE_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, false)"
# Arm: become the schema's one idle sentinel (a try: another idle worker may be it), then
# take the wake key exclusively: it waits (up to lock_timeout) for every open emitting
# transaction that holds it shared, so the claim that follows sees their rows. From then
# on every emitting transaction NOTIFYs. True: armed; false: another worker is the
# sentinel (this one still LISTENs); SQLSTATE 55P03: an emitting transaction is still open.
WAKE_ARM = (
    "SELECT CASE WHEN pg_try_advisory_lock(hashtext('outbox.wakeup.sentinel'),"
    " hashtext('{schema}')) THEN (SELECT true FROM pg_advisory_lock(" + core.WAKE_KEY + "))"
    " ELSE false END"
)
# Disarm (busy: it will claim again by itself): emitting transactions stop NOTIFYing.
WAKE_DISARM = "SELECT pg_advisory_unlock_all()"
# Hand over: a sentinel that goes busy tells the other listeners, so an idle worker that
# lost the election to it tries again now (else nobody would be armed until its next poll,
# and emitters, seeing no sentinel, would not NOTIFY). One NOTIFY per hand-over.
WAKE_HANDOVER = "SELECT pg_notify(" + core.WAKE_CHANNEL + ", '')"
# Seconds until the earliest pending delivery comes due (a retry, a lease, a breaker's
# pause), negative if one is due now, NULL if none: one descent of deliveries_due (and
# one of deliveries_fresh: a fresh row is due now, the next claim places it).
NEXT_DUE = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM {schema}.deliveries WHERE state = 'fresh')
            THEN -1::float8
            ELSE (SELECT EXTRACT(EPOCH FROM visible_at - now())::float8
                    FROM {schema}.deliveries
                   WHERE state = 'pending' AND visible_at < 'infinity'
                   ORDER BY visible_at LIMIT 1) END
"""
