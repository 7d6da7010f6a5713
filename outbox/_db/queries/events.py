"""SQL of the event log (outbox.admin.events): the lists and detail views the HTTP API, the
console and the customer portal share.

Lists are keyset-paginated on the UUIDv7 primary key, newest first (``id < %(before)s``),
never OFFSET: a page costs the rows it returns whatever its depth. A time range is an id
range too (a UUIDv7 starts with its millisecond), so it walks ``events_pkey``;
``type`` and ``tenant`` walk the (type, id) / (tenant, id) indexes of migration 0006.
Every selector is optional (NULL switches its condition off): run them unprepared
(``prepare=False``) so each execution is planned with its actual values.
"""

from __future__ import annotations

from outbox._db.queries.endpoints import ENDPOINT_COLUMNS

# %(owner)s (NULL: everyone's): only deliveries to endpoints that tenant owns (the customer
# portal: an all-tenants endpoint is an internal consumer, not the customer's).
_OWNED = """(%(owner)s::text IS NULL OR EXISTS (
            SELECT 1 FROM {schema}.endpoints oep
             WHERE oep.id = d.endpoint_id AND oep.tenant = %(owner)s::text))"""

# With %(owner)s: only events with at least one delivery to an endpoint that tenant owns (in
# EVENT_LIST the per-event count the list computes anyway, by the (event_id, endpoint_id)
# unique index): an event only an internal all-tenants endpoint received, its type and its
# payload, never shows in the portal.
_HAS_OWNED = """(%(owner)s::text IS NULL OR EXISTS (
            SELECT 1 FROM {schema}.deliveries d
             WHERE d.event_id = e.id AND """ + _OWNED + """))"""

EVENT_LIST = """
SELECT e.id, e.type, e.tenant, e.key, e.created_at,
       COALESCE(s.delivered, 0) AS delivered, COALESCE(s.pending, 0) AS pending,
       COALESCE(s.dead, 0) AS dead
  FROM {schema}.events e
  LEFT JOIN LATERAL (
        SELECT count(*) AS total,
               count(*) FILTER (WHERE d.state = 'delivered') AS delivered,
               count(*) FILTER (WHERE d.state = 'pending') AS pending,
               count(*) FILTER (WHERE d.state = 'dead') AS dead
          FROM {schema}.deliveries d
         WHERE d.event_id = e.id AND """ + _OWNED + """) s ON true
 WHERE (%(type)s::text IS NULL OR e.type = %(type)s::text)
   AND (%(owner)s::text IS NULL OR s.total > 0)  -- went to an endpoint the owner owns
   AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s::text)
   AND (%(low)s::uuid IS NULL OR e.id >= %(low)s::uuid)
   AND (%(high)s::uuid IS NULL OR e.id < %(high)s::uuid)
   AND (%(before)s::uuid IS NULL OR e.id < %(before)s::uuid)
 ORDER BY e.id DESC
 LIMIT %(limit)s
"""

EVENT_GET = """
SELECT e.id, e.type, e.tenant, e.key, e.idempotency_key, e.payload::text AS payload,
       e.created_at
  FROM {schema}.events e
 WHERE e.id = %(id)s AND (%(owner)s::text IS NULL OR e.tenant = %(owner)s::text)
   AND """ + _HAS_OWNED + """
"""

# The event's deliveries (by the (event_id, endpoint_id) unique index), with %(owner)s as in
# EVENT_LIST.
EVENT_DELIVERIES = """
SELECT d.id, d.endpoint_id, ep.url AS endpoint_url, d.state, d.attempts,
       NULLIF(d.visible_at, 'infinity') AS visible_at,  -- infinity: parked (disabled)
       d.lease_token IS NOT NULL AS leased, d.last_status, d.last_error, d.created_at,
       d.finished_at
  FROM {schema}.deliveries d
  LEFT JOIN {schema}.endpoints ep ON ep.id = d.endpoint_id
 WHERE d.event_id = %(id)s AND """ + _OWNED + """
 ORDER BY d.id
"""

# Every attempt of those deliveries, oldest first (by delivery_attempts_delivery, and a
# first-try success from its delivery row by primary key: the view delivery_attempt_log).
ATTEMPTS_OF = """
SELECT delivery_id, attempt, outcome, status_code, duration_ms, error_class, error,
       response_excerpt, worker, created_at
  FROM {schema}.delivery_attempt_log
 WHERE delivery_id = ANY (%s::bigint[])
 ORDER BY delivery_id, created_at, id
"""

# Which of these deliveries go to an endpoint of tenant %(owner)s (the portal's scope check
# before a replay of single deliveries).
DELIVERIES_OWNED = """
SELECT d.id FROM {schema}.deliveries d
  JOIN {schema}.endpoints ep ON ep.id = d.endpoint_id
 WHERE d.id = ANY (%(ids)s::bigint[]) AND ep.tenant = %(owner)s::text
"""

# The endpoints that receive every tenant's events (by endpoints_all_tenants).
ALL_TENANT_ENDPOINTS = "SELECT id FROM {schema}.endpoints WHERE all_tenants ORDER BY id"

# Endpoints a page at a time, oldest first (UUIDv7 ids), keyset on the id: by the primary key,
# or by endpoints_by_tenant with %(tenant)s. Unprepared, like EVENT_LIST.
ENDPOINT_PAGE = (
    "SELECT" + ENDPOINT_COLUMNS + """FROM {schema}.endpoints
 WHERE (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
   AND (%(enabled)s::boolean IS NULL OR enabled = %(enabled)s::boolean)
   AND (%(after)s::uuid IS NULL OR id > %(after)s::uuid)
 ORDER BY id
 LIMIT %(limit)s
""")
