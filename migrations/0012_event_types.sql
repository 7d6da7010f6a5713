-- outbox 0012: the event catalog. One row per event type: its description, the JSON Schema
-- (draft 2020-12) its payloads must match, an example payload, and a deprecated flag.
--
-- Versioning is by name: a breaking change to a payload is a new type, e.g. invoice.paid.v2
-- beside invoice.paid. Endpoints subscribe by exact type name, so each receiver opts in to
-- the new shape when it is ready while the sender emits both during the change; nothing
-- in events, routing or signing knows about versions.
--
-- tenants says which tenants the portal offers the type to (their endpoints may subscribe to
-- it there): NULL every tenant, '{}' none (an internal type), else those listed.
--
-- event_catalog holds one row whose version a statement trigger bumps on every change of
-- event_types (whoever makes it: outbox, psql, a restore). Emitting processes keep the
-- schemas in memory and read this single row only when their copy is older than
-- OUTBOX_CATALOG_REFRESH_SECONDS, re-reading the types only when the version moved.
--
-- Locks and cost: two new tables and a trigger; nothing existing is rewritten or locked.

CREATE TABLE IF NOT EXISTS event_types (
    name        text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128),
    description text NOT NULL DEFAULT '',
    json_schema jsonb,
    example     jsonb,
    deprecated  boolean NOT NULL DEFAULT false,
    tenants     text[],
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS event_catalog (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    version bigint NOT NULL DEFAULT 0
);
INSERT INTO event_catalog (one, version) VALUES (true, 0) ON CONFLICT (one) DO NOTHING;

CREATE OR REPLACE FUNCTION event_catalog_bump() RETURNS trigger
LANGUAGE plpgsql VOLATILE SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE event_catalog SET version = version + 1;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS event_types_changed ON event_types;
CREATE TRIGGER event_types_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON event_types FOR EACH STATEMENT EXECUTE FUNCTION event_catalog_bump();
