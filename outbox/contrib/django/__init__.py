"""Django integration: ``outbox.contrib.django``.

- :func:`webhook_view` (receiving side, ``outbox.contrib.django.inbox``): verify, dedupe
  and run a view exactly once per webhook-id.
"""

from __future__ import annotations

from outbox.contrib.django.inbox import webhook_view

__all__ = ["webhook_view"]
