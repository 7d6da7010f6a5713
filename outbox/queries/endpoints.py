"""SQL of endpoints (outbox.endpoints) and of their secrets at rest (outbox.secrets_at_rest)."""

from __future__ import annotations

# --- endpoints --------------------------------------------------------------------------
_ENDPOINT_COLUMNS = """
    id, url, description, tenant, all_tenants, event_types, headers, enabled, disabled_reason,
    max_attempts, retry_base_seconds, retry_cap_seconds, timeout_seconds, max_in_flight,
    ordered, previous_secret_expires_at, created_at, updated_at
"""

ENDPOINT_INSERT = (
    """
INSERT INTO {schema}.endpoints
    (id, url, description, tenant, all_tenants, secret, event_types, headers,
     max_attempts, retry_base_seconds, retry_cap_seconds, timeout_seconds, max_in_flight,
     ordered)
VALUES (%(id)s, %(url)s, %(description)s, %(tenant)s, %(all_tenants)s, %(secret)s,
        %(event_types)s, %(headers)s,
        %(max_attempts)s, %(retry_base_seconds)s, %(retry_cap_seconds)s,
        %(timeout_seconds)s, %(max_in_flight)s, %(ordered)s)
RETURNING"""
    + _ENDPOINT_COLUMNS
)

ENDPOINT_LIST = "SELECT" + _ENDPOINT_COLUMNS + "FROM {schema}.endpoints ORDER BY created_at, id"
# One tenant's endpoints (by endpoints_by_tenant).
ENDPOINT_LIST_TENANT = (
    "SELECT" + _ENDPOINT_COLUMNS + "FROM {schema}.endpoints WHERE tenant = %s"
    " ORDER BY created_at, id"
)

ENDPOINT_GET = "SELECT" + _ENDPOINT_COLUMNS + "FROM {schema}.endpoints WHERE id = %s"

# Disabling parks the endpoint's idle pending deliveries (visible_at = infinity) so claims
# skip them at no cost; enabling makes parked ones due at once. Leased rows finish normally.
ENDPOINT_SET_ENABLED = (
    """
WITH ep AS (
    UPDATE {schema}.endpoints
       SET enabled = %(enabled)s, disabled_reason = %(reason)s, updated_at = now()
     WHERE id = %(id)s
    RETURNING"""
    + _ENDPOINT_COLUMNS
    + """),
parked AS (
    UPDATE {schema}.deliveries d
       SET visible_at = CASE WHEN %(enabled)s THEN now() ELSE 'infinity' END
      FROM ep
     WHERE d.endpoint_id = ep.id AND d.state = 'pending'
       AND CASE WHEN %(enabled)s THEN d.visible_at = 'infinity'
                ELSE d.visible_at <= now() OR d.lease_token IS NULL END)
SELECT * FROM ep
"""
)

# Partial update: NULL keeps a column; the flags say whether to replace the type filter
# (NULL there means every type) and whether to drop the old headers before merging new ones.
ENDPOINT_UPDATE = (
    """
UPDATE {schema}.endpoints
   SET url = COALESCE(%(url)s::text, url),
       description = COALESCE(%(description)s::text, description),
       event_types = CASE WHEN %(set_types)s THEN %(event_types)s::text[] ELSE event_types END,
       headers = CASE WHEN %(clear_headers)s THEN '{{}}'::jsonb ELSE headers END
                 || %(headers)s::jsonb,
       max_attempts = COALESCE(%(max_attempts)s::integer, max_attempts),
       retry_base_seconds = COALESCE(%(retry_base_seconds)s::float8, retry_base_seconds),
       retry_cap_seconds = COALESCE(%(retry_cap_seconds)s::float8, retry_cap_seconds),
       timeout_seconds = COALESCE(%(timeout_seconds)s::float8, timeout_seconds),
       max_in_flight = COALESCE(%(max_in_flight)s::integer, max_in_flight),
       ordered = COALESCE(%(ordered)s::boolean, ordered),
       updated_at = now()
 WHERE id = %(id)s
RETURNING"""
    + _ENDPOINT_COLUMNS
)

# Rotation: the current secret becomes the previous one, which keeps signing beside the
# new one until it expires (the claim sends it while previous_secret_expires_at > now()).
# Refused (no row) while an earlier rotation's grace is still running, unless forced.
ENDPOINT_ROTATE_SECRET = (
    """
UPDATE {schema}.endpoints
   SET previous_secret = secret,
       previous_secret_expires_at = now() + make_interval(secs => %(grace)s),
       secret = %(secret)s,
       updated_at = now()
 WHERE id = %(id)s
   AND (%(force)s OR previous_secret_expires_at IS NULL OR previous_secret_expires_at <= now())
RETURNING"""
    + _ENDPOINT_COLUMNS
)

# The secrets that sign a request to this endpoint now (for `outbox endpoints ping`).
ENDPOINT_SIGNING_SECRETS = """
SELECT secret, CASE WHEN previous_secret_expires_at > now() THEN previous_secret END
  FROM {schema}.endpoints WHERE id = %s
"""

ENDPOINT_SECRETS_FOR_UPDATE = """
SELECT id, secret, previous_secret FROM {schema}.endpoints ORDER BY id FOR UPDATE
"""
ENDPOINT_SET_SECRETS = """
UPDATE {schema}.endpoints SET secret = %s, previous_secret = %s WHERE id = %s
"""
