"""The test project's application: one model, and a migration that depends on outbox's."""
