"""Django integration: ``outbox.contrib.django``.

- :func:`emit` / :func:`emit_many` (sending side, ``outbox.contrib.django.emit``): emit
  inside ``transaction.atomic()`` on Django's own connection, committing with the ORM's
  writes.
- :func:`webhook_view` (receiving side, ``outbox.contrib.django.inbox``): verify, dedupe
  and run a view exactly once per webhook-id.
"""

from __future__ import annotations

from outbox.contrib.django.emit import emit, emit_many
from outbox.contrib.django.inbox import webhook_view

__all__ = ["emit", "emit_many", "webhook_view"]
