-- outbox 0003: the W3C traceparent of the span that emitted the event (OpenTelemetry),
-- sent with every delivery so a trace links the business write to the webhook call.
-- A nullable column without a default: no table rewrite.
ALTER TABLE events ADD COLUMN traceparent text;
