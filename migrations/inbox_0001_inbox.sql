-- outbox inbox 0001: the receiving side's dedupe table (outbox.inbox.receive).
-- A separate series (inbox_NNNN_*.sql, recorded in <schema>.inbox_migrations), applied by
-- `outbox migrate --inbox` with search_path set to the schema: a receiver-only service gets
-- this table and none of the sender's. A service that sends and receives runs both
-- `outbox migrate` and `outbox migrate --inbox` (same schema or not: no name is shared).
--
-- One row per processed webhook: (source, webhook_id) is the dedupe key. `source` is ''
-- unless the receiver namespaces ids per sender (receive(..., source=...)). A row is
-- inserted in the receiver's own transaction, with its business writes, and is deleted
-- only by `outbox inbox prune` once it is older than the sender's retry horizon.

CREATE TABLE inbox (
    source      text NOT NULL DEFAULT '' CHECK (length(source) <= 128),
    webhook_id  text NOT NULL CHECK (webhook_id <> '' AND length(webhook_id) <= 256),
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, webhook_id)
);

-- prune deletes the oldest rows first, by received_at.
CREATE INDEX inbox_received_at ON inbox (received_at);
