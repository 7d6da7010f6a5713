"""Transaction control of the worker's statement batches (outbox.delivery.connections)."""

from __future__ import annotations

# Every batch of the worker's statements runs in a transaction of its own at READ
# COMMITTED whatever the server's, database's or role's default (the claim and the
# completion of ordered endpoints depend on it: migrations/0005_ordered.sql), with nothing
# set on the session (outbox.delivery.connections).
BEGIN_READ_COMMITTED = "BEGIN ISOLATION LEVEL READ COMMITTED"
COMMIT = "COMMIT"
