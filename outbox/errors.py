"""Every error outbox raises on purpose derives from :class:`OutboxError`.

Exception tree::

    OutboxError
    ├── ConfigurationError      a setting is missing or invalid
    ├── DatabaseError           PostgreSQL failed (translated at the driver edge)
    │   ├── DatabaseUnavailable cannot connect; message names the URL, password masked
    │   └── SchemaMissing       outbox tables not found: run `outbox migrate`
    ├── NotInTransaction        emit on an autocommit connection outside a transaction,
    │                           or on a transaction that has already failed
    ├── InvalidEvent            type or payload refused before any SQL ran
    ├── InvalidEndpoint         URL, secret, header or filter refused before any SQL ran
    ├── EndpointNotFound        no endpoint with that id
    ├── DeliveryNotFound        no delivery with that id
    ├── InvalidEventType        a catalog entry (name, schema, example) refused; nothing written
    ├── EventTypeNotFound       no event type of that name in the catalog
    ├── OperationRefused        an operator command would do harm (e.g. replay onto a
    │                           disabled endpoint); nothing was changed
    ├── InvalidWebhook          a received webhook was refused (receiver side)
    │   ├── InvalidSignature    ``verify`` rejected it: signature, timestamp, headers
    │   └── MalformedWebhook    signed, but not usable: body not JSON, webhook-id too long
    └── MigrationError          a migration file is missing, reordered or failed

Nothing is written when any of these is raised by emit or an endpoint function:
validation happens before SQL, and SQL failures abort the caller's own transaction.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "DatabaseError",
    "DatabaseUnavailable",
    "DeliveryNotFound",
    "EndpointNotFound",
    "EventTypeExists",
    "EventTypeNotFound",
    "InvalidEndpoint",
    "InvalidEvent",
    "InvalidEventType",
    "InvalidSignature",
    "InvalidWebhook",
    "MalformedWebhook",
    "MigrationError",
    "NotInTransaction",
    "OperationRefused",
    "OutboxError",
    "SchemaMissing",
]


class OutboxError(Exception):
    """Root of every error outbox raises on purpose."""


class ConfigurationError(OutboxError):
    """A setting is missing or invalid."""


class DatabaseError(OutboxError):
    """A PostgreSQL error, translated from psycopg at one edge (:mod:`outbox._db.connection`)."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached; the message names the URL with its password masked."""


class SchemaMissing(DatabaseError):
    """The outbox tables do not exist in the configured schema: run ``outbox migrate``."""


class NotInTransaction(OutboxError):
    """``emit`` was called where the event could commit without the caller's own writes."""


class InvalidEvent(OutboxError):
    """The event type or payload was refused; nothing was sent to the database."""


class InvalidEndpoint(OutboxError):
    """An endpoint URL, secret, header or filter was refused; nothing was written."""


class EndpointNotFound(OutboxError):
    """No endpoint has the given id."""


class DeliveryNotFound(OutboxError):
    """No delivery has the given id."""


class InvalidEventType(OutboxError):
    """An event type's name, JSON Schema, example or description was refused (the message
    names the problem, and the JSON path for an example); nothing was written."""


class EventTypeExists(InvalidEventType):
    """The event type is already registered: update it, or register a new name (e.g.
    ``invoice.paid.v2``) for a breaking change; nothing was written."""


class EventTypeNotFound(OutboxError):
    """No event type of the given name is registered in the catalog."""


class OperationRefused(OutboxError):
    """An operator command was refused before changing anything; the message says why and
    how to proceed (e.g. replay onto a disabled endpoint without ``--enable-endpoint``)."""


class InvalidWebhook(OutboxError):
    """A received webhook was refused (receiver side); answer it with 400. Raised by
    :func:`outbox.verify` and :func:`outbox.inbox.receive` before anything is written."""


class InvalidSignature(InvalidWebhook):
    """A received webhook failed verification (bad signature, stale timestamp, bad headers)."""


class MalformedWebhook(InvalidWebhook):
    """A correctly signed webhook that cannot be processed: the body is not JSON, or the
    ``webhook-id`` is too long to record."""


class MigrationError(OutboxError):
    """A migration could not be applied, or the recorded history does not match the files."""
