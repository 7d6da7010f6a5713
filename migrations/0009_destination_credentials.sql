-- outbox 0009: broker destinations (amqp://, nats://, redis:// endpoint URLs). The
-- credentials of a broker URL (user:pass@) are not kept in endpoints.url, which is shown
-- by the CLI, the API and the console: they are stored here, sealed with
-- OUTBOX_SECRET_KEY like the signing secrets, and read only by the worker and by ping.
-- A nullable column without a default: no table rewrite.
ALTER TABLE endpoints ADD COLUMN url_credentials text;
