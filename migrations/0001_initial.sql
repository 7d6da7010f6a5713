-- outbox 0001: endpoints, events, deliveries, delivery_attempts.
-- Applied by `outbox migrate` with search_path set to the outbox schema (OUTBOX_SCHEMA),
-- so no table name below is schema-qualified.

CREATE TABLE endpoints (
    id                         uuid PRIMARY KEY,
    url                        text NOT NULL CHECK (length(url) <= 2048),
    description                text NOT NULL DEFAULT '',
    secret                     text NOT NULL,
    previous_secret            text,
    previous_secret_expires_at timestamptz,
    event_types                text[],                 -- NULL: every event type
    headers                    jsonb NOT NULL DEFAULT '{}'::jsonb,
    enabled                    boolean NOT NULL DEFAULT true,
    disabled_reason            text,
    max_attempts               integer CHECK (max_attempts BETWEEN 1 AND 100),
    retry_base_seconds         double precision CHECK (retry_base_seconds > 0),
    retry_cap_seconds          double precision CHECK (retry_cap_seconds > 0),
    timeout_seconds            double precision CHECK (timeout_seconds > 0),
    max_in_flight              integer CHECK (max_in_flight > 0),
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);

-- The payload is `json`, not `jsonb`: it keeps the exact bytes emit serialised, which are
-- the bytes workers sign and POST, and it is cheaper to insert.
CREATE TABLE events (
    id              uuid PRIMARY KEY,                  -- UUIDv7; the webhook-id
    type            text NOT NULL CHECK (type <> '' AND length(type) <= 128),
    payload         json NOT NULL,
    key             text,                               -- optional ordering key
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX events_idempotency_key ON events (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- No created_at index: ids are UUIDv7, so "older than T" is a range scan on the primary key.

-- One row per (event, endpoint). visible_at is both the retry schedule and the crash lease.
-- No foreign keys on this hot table, on purpose: emit inserts the event and its deliveries
-- in one statement from rows it just wrote or read, endpoints are disabled, never deleted,
-- and pruning deletes deliveries and attempts before their events. The two FK triggers
-- cost about a quarter of emit's statement time (bench/emit.py).
CREATE TABLE deliveries (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     uuid NOT NULL,
    endpoint_id  uuid NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts     integer NOT NULL DEFAULT 0,
    visible_at   timestamptz NOT NULL DEFAULT now(),
    lease_token  uuid,
    last_status  integer,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,                          -- delivered or dead
    UNIQUE (event_id, endpoint_id)
) WITH (
    -- queue churn: vacuum and analyze early, leave room for updated row versions
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1,
    fillfactor = 85
);
-- The claim index: its size follows the backlog, not the history.
CREATE INDEX deliveries_due ON deliveries (visible_at) WHERE state = 'pending';
-- Dead-letter inspection and replay by endpoint, and pruning of finished rows.
CREATE INDEX deliveries_dead ON deliveries (endpoint_id, finished_at) WHERE state = 'dead';
CREATE INDEX deliveries_finished ON deliveries (finished_at) WHERE state <> 'pending';

CREATE TABLE delivery_attempts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id      bigint NOT NULL,                 -- deliveries.id (no FK: see above)
    attempt          integer NOT NULL,
    outcome          text NOT NULL,   -- delivered, retry, dead, gone, replayed
    status_code      integer,
    duration_ms      double precision,
    error_class      text,
    error            text,
    response_excerpt text,
    worker           text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id);
