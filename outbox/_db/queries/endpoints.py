"""SQL of endpoints (outbox.admin.endpoints) and of their secrets at rest (outbox.admin.secrets)."""

from __future__ import annotations

from outbox._db.queries.emit import filter_passes, payload_doc
from outbox._db.queries.flow import adaptive_rate
from outbox._db.queries.opevents import OP_EMIT, OP_WAKE

# --- endpoints --------------------------------------------------------------------------
ENDPOINT_COLUMNS = """
    id, url, description, tenant, all_tenants, event_types, headers, enabled, disabled_reason,
    max_attempts, retry_base_seconds, retry_cap_seconds, timeout_seconds, max_in_flight,
    ordered, previous_secret_expires_at, created_at, updated_at,
    rate_limit, rate_burst, tenant_rate_limit,
    secret_headers, auth_kind, tls_client_cert_subject, tls_client_cert_expires_at,
    oauth2_token_url, oauth2_client_id, oauth2_scope,
    signature, public_key,
    CASE WHEN previous_secret_expires_at > now() THEN previous_public_key END
        AS previous_public_key, filter
"""

ENDPOINT_INSERT = (
    """
INSERT INTO {schema}.endpoints
    (id, url, description, tenant, all_tenants, secret, event_types, headers,
     max_attempts, retry_base_seconds, retry_cap_seconds, timeout_seconds, max_in_flight,
     ordered, url_credentials, rate_limit, rate_burst,
     secret_header_values, secret_headers, auth_kind, auth_secret,
     tls_client_cert, tls_client_key, tls_client_cert_subject, tls_client_cert_expires_at,
     oauth2_token_url, oauth2_client_id, oauth2_client_secret, oauth2_scope,
     signature, public_key, filter, filter_path)
VALUES (%(id)s, %(url)s, %(description)s, %(tenant)s, %(all_tenants)s, %(secret)s,
        %(event_types)s, %(headers)s,
        %(max_attempts)s, %(retry_base_seconds)s, %(retry_cap_seconds)s,
        %(timeout_seconds)s, %(max_in_flight)s, %(ordered)s, %(url_credentials)s,
        %(rate_limit)s, %(rate_burst)s,
        %(secret_headers)s, ARRAY(SELECT k FROM jsonb_object_keys(%(secret_headers)s::jsonb) k
                                   ORDER BY k),
        %(auth_kind)s, %(auth_secret)s, %(tls_client_cert)s, %(tls_client_key)s,
        %(tls_client_cert_subject)s, %(tls_client_cert_expires_at)s,
        %(oauth2_token_url)s, %(oauth2_client_id)s, %(oauth2_client_secret)s,
        NULLIF(%(oauth2_scope)s::text, ''),
        %(signature)s, %(public_key)s, %(filter)s, %(filter_path)s::jsonpath)
RETURNING"""
    + ENDPOINT_COLUMNS
)

ENDPOINT_LIST = "SELECT" + ENDPOINT_COLUMNS + "FROM {schema}.endpoints ORDER BY created_at, id"
# One tenant's endpoints (by endpoints_by_tenant).
ENDPOINT_LIST_TENANT = (
    "SELECT" + ENDPOINT_COLUMNS + "FROM {schema}.endpoints WHERE tenant = %s"
    " ORDER BY created_at, id"
)

ENDPOINT_GET = "SELECT" + ENDPOINT_COLUMNS + "FROM {schema}.endpoints WHERE id = %s"

# Disabling parks the endpoint's idle pending deliveries (visible_at = infinity) so claims
# skip them at no cost; enabling makes parked ones due at once. Leased rows finish normally.
# A change of state emits outbox.endpoint.disabled / outbox.endpoint.enabled in the same
# statement (outbox._db.queries.opevents), ``by`` %(actor)s; setting the state it already
# has emits nothing. ``old`` locks the row first (the UPDATE reads it: it runs first) and
# reads its latest committed state, so two concurrent disables emit one event.
ENDPOINT_SET_ENABLED = (
    """
WITH old AS MATERIALIZED (
    SELECT id, enabled FROM {schema}.endpoints WHERE id = %(id)s FOR UPDATE),
ep AS (
    UPDATE {schema}.endpoints
       SET enabled = %(enabled)s, disabled_reason = %(reason)s, updated_at = now()
     WHERE id = (SELECT id FROM old)
    RETURNING"""
    + ENDPOINT_COLUMNS
    + """),
parked AS (
    UPDATE {schema}.deliveries d
       SET visible_at = CASE WHEN %(enabled)s THEN now() ELSE 'infinity' END
      FROM ep
     WHERE d.endpoint_id = ep.id AND d.state = 'pending'
       AND CASE WHEN %(enabled)s THEN d.visible_at = 'infinity'
                ELSE d.visible_at <= now() OR d.lease_token IS NULL END),
op_src AS (
    SELECT CASE WHEN ep.enabled THEN 'outbox.endpoint.enabled'
                ELSE 'outbox.endpoint.disabled' END AS type,
           ep.tenant,
           CASE WHEN ep.enabled
                THEN json_build_object('endpoint_id', ep.id, 'tenant', ep.tenant,
                                       'by', %(actor)s::text)
                ELSE json_build_object('endpoint_id', ep.id, 'tenant', ep.tenant,
                                       'by', %(actor)s::text, 'reason', ep.disabled_reason)
           END AS data
      FROM ep JOIN old ON old.id = ep.id
     WHERE old.enabled IS DISTINCT FROM ep.enabled),"""
    + OP_EMIT + ","
    + OP_WAKE
    + """
SELECT""" + ENDPOINT_COLUMNS + """FROM ep WHERE (SELECT count(*) FROM op_wake) >= 0
"""
)

# Partial update: NULL keeps a column; the flags say whether to replace the type filter
# (NULL there means every type) and whether to drop the old headers before merging new ones.
ENDPOINT_UPDATE = (
    """
UPDATE {schema}.endpoints
   SET url = COALESCE(%(url)s::text, url),
       url_credentials = CASE WHEN %(url)s::text IS NULL THEN url_credentials
                              ELSE %(url_credentials)s::text END,
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
       rate_limit = CASE WHEN %(clear_rate_limit)s THEN NULL
                         ELSE COALESCE(%(rate_limit)s::float8, rate_limit) END,
       rate_burst = CASE WHEN %(clear_rate_limit)s THEN NULL
                         ELSE COALESCE(%(rate_burst)s::integer, rate_burst) END,
       secret_header_values = CASE WHEN %(clear_secret_headers)s THEN '{{}}'::jsonb
                                   ELSE secret_header_values END || %(secret_headers)s::jsonb,
       secret_headers = ARRAY(SELECT k FROM jsonb_object_keys(
           CASE WHEN %(clear_secret_headers)s THEN '{{}}'::jsonb
                ELSE secret_header_values END || %(secret_headers)s::jsonb) k ORDER BY k),
       auth_kind = CASE WHEN %(set_auth)s THEN %(auth_kind)s::text ELSE auth_kind END,
       auth_secret = CASE WHEN %(set_auth)s THEN %(auth_secret)s::text ELSE auth_secret END,
       tls_client_cert = CASE WHEN %(set_tls)s THEN %(tls_client_cert)s::text
                              ELSE tls_client_cert END,
       tls_client_key = CASE WHEN %(set_tls)s THEN %(tls_client_key)s::text
                             ELSE tls_client_key END,
       tls_client_cert_subject = CASE WHEN %(set_tls)s THEN %(tls_client_cert_subject)s::text
                                      ELSE tls_client_cert_subject END,
       tls_client_cert_expires_at = CASE WHEN %(set_tls)s
                                         THEN %(tls_client_cert_expires_at)s::timestamptz
                                         ELSE tls_client_cert_expires_at END,
       oauth2_token_url = CASE WHEN %(oauth2_clear)s THEN NULL
                               ELSE COALESCE(%(oauth2_token_url)s::text, oauth2_token_url) END,
       oauth2_client_id = CASE WHEN %(oauth2_clear)s THEN NULL
                               ELSE COALESCE(%(oauth2_client_id)s::text, oauth2_client_id) END,
       oauth2_client_secret = CASE WHEN %(oauth2_clear)s THEN NULL
                                   ELSE COALESCE(%(oauth2_client_secret)s::text,
                                                 oauth2_client_secret) END,
       oauth2_scope = CASE WHEN %(oauth2_clear)s THEN NULL
                           WHEN %(oauth2_scope)s::text IS NULL THEN oauth2_scope
                           ELSE NULLIF(%(oauth2_scope)s::text, '') END,
       filter = CASE WHEN %(set_filter)s THEN %(filter)s::jsonb ELSE filter END,
       filter_path = CASE WHEN %(set_filter)s THEN %(filter_path)s::jsonpath
                          ELSE filter_path END,
       updated_at = now()
 WHERE id = %(id)s
RETURNING"""
    + ENDPOINT_COLUMNS
)

# Rotation: the current secret becomes the previous one, which keeps signing beside the
# new one until it expires (the claim sends it while previous_secret_expires_at > now()).
# Refused (no row) while an earlier rotation's grace is still running, unless forced. An
# ed25519 endpoint's public key moves along with its secret key (NULL for hmac), and only
# an endpoint of the %(signature)s scheme rotates (no row otherwise: refused).
ENDPOINT_ROTATE_SECRET = (
    """
UPDATE {schema}.endpoints
   SET previous_secret = secret,
       previous_secret_expires_at = now() + make_interval(secs => %(grace)s),
       secret = %(secret)s,
       previous_public_key = public_key,
       public_key = %(public_key)s,
       updated_at = now()
 WHERE id = %(id)s AND signature = %(signature)s
   AND (%(force)s OR previous_secret_expires_at IS NULL OR previous_secret_expires_at <= now())
RETURNING"""
    + ENDPOINT_COLUMNS
)

# The secrets that sign a request to this endpoint now (for `outbox endpoints ping`).
ENDPOINT_SIGNING_SECRETS = """
SELECT secret, CASE WHEN previous_secret_expires_at > now() THEN previous_secret END
  FROM {schema}.endpoints WHERE id = %s
"""

# The sealed OAuth2 client secret (for `outbox endpoints ping`).
ENDPOINT_OAUTH2_SECRET = "SELECT oauth2_client_secret FROM {schema}.endpoints WHERE id = %s"

# The sealed credentials of a broker URL (for `outbox endpoints ping`).
ENDPOINT_CREDENTIALS = "SELECT url_credentials FROM {schema}.endpoints WHERE id = %s"

# An endpoint's credentials (migrations/0014_endpoint_auth.sql), sealed: for sending
# (`outbox endpoints ping`); the worker's claim reads the same columns.
ENDPOINT_AUTH_SECRETS = """
SELECT secret_header_values, auth_kind, auth_secret, tls_client_cert, tls_client_key
  FROM {schema}.endpoints WHERE id = %s
"""
# What an update's header and auth checks need, the row locked until the update commits.
ENDPOINT_AUTH_STATE_FOR_UPDATE = """
SELECT headers, secret_headers, auth_kind, url FROM {schema}.endpoints WHERE id = %s
   FOR UPDATE
"""

ENDPOINT_SECRETS_FOR_UPDATE = """
SELECT id, secret, previous_secret, url_credentials, secret_header_values, auth_secret,
       tls_client_cert, tls_client_key, oauth2_client_secret
  FROM {schema}.endpoints
 ORDER BY id FOR UPDATE
"""
ENDPOINT_SET_SECRETS = """
UPDATE {schema}.endpoints SET secret = %s, previous_secret = %s, url_credentials = %s,
       secret_header_values = %s, auth_secret = %s, tls_client_cert = %s, tls_client_key = %s,
       oauth2_client_secret = %s
 WHERE id = %s
"""

# A tenant's own rate limit (the portal): at most the operator's rate_limit, if any
# (refused otherwise: no row). NULL removes it.
ENDPOINT_SET_TENANT_RATE_LIMIT = (
    """
UPDATE {schema}.endpoints
   SET tenant_rate_limit = %(limit)s::float8, updated_at = now()
 WHERE id = %(id)s AND tenant IS NOT DISTINCT FROM %(tenant)s
   AND (%(limit)s::float8 IS NULL OR rate_limit IS NULL OR %(limit)s::float8 <= rate_limit)
RETURNING"""
    + ENDPOINT_COLUMNS
)

# Flow control state per endpoint (outbox.admin.flow; migrations/0008_flow_control.sql). The
# allowed rate as the claim computes it (delivery/queries/claim.py BUDGET): the lower of the
# fixed limits and the adaptive rate while it applies (60 s after its last cut); NULL:
# unlimited. Throttled: an adaptive rate or a pause in force. By primary key.
_FLOW_COLUMNS = """
SELECT e.id AS endpoint_id, least(e.rate_limit, e.tenant_rate_limit) AS rate_limit,
       least(least(e.rate_limit, e.tenant_rate_limit), a.adaptive) AS allowed_rate,
       (a.adaptive IS NOT NULL OR COALESCE(f.paused_until > now(), false)) AS throttled,
       CASE WHEN f.paused_until > now() THEN f.paused_until END AS paused_until,
       COALESCE(f.throttled_total, 0) AS throttled_total
  FROM {schema}.endpoints e
  LEFT JOIN {schema}.endpoint_flow f ON f.endpoint_id = e.id
 CROSS JOIN LATERAL (
      SELECT """ + adaptive_rate("f") + """ AS adaptive) a
"""
FLOW_STATES = _FLOW_COLUMNS + " WHERE e.id = ANY (%s::uuid[])"

# Whether a sample payload %(doc)s (json text) matches the endpoint's stored filter, with
# the routing's own expression (outbox._db.queries.emit), and whether each of %(paths)s
# (the filter's top-level conditions, compiled from the stored filter) holds.
ENDPOINT_TEST_FILTER = f"""
SELECT COALESCE({filter_passes(payload_doc("d.doc"))}, false),
       ARRAY(SELECT COALESCE({payload_doc("d.doc")} @@ u.p::jsonpath, false)
               FROM unnest(%(paths)s::text[]) WITH ORDINALITY AS u(p, n) ORDER BY u.n)
  FROM {{schema}}.endpoints ep, (SELECT %(doc)s::json AS doc) d
 WHERE ep.id = %(id)s
"""
