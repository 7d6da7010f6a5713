"""SQL of :mod:`outbox.testing`: what a block of test code emitted.

Both read the ``events`` primary key from a UUIDv7 floor (``id >= %(floor)s``): a range
scan, whatever the size of the table.
"""

from __future__ import annotations

EVENT_IDS_SINCE = "SELECT id FROM {schema}.events WHERE id >= %(floor)s"

# deliveries: how many endpoints the event fanned out to (the (event_id, endpoint_id) index)
EVENTS_SINCE = """
SELECT e.id, e.type, e.payload, e.key, e.tenant, e.idempotency_key,
       (SELECT count(*) FROM {schema}.deliveries d WHERE d.event_id = e.id) AS deliveries
  FROM {schema}.events e
 WHERE e.id >= %(floor)s
 ORDER BY e.id
"""
