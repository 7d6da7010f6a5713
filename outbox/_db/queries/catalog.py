"""SQL of the event catalog (outbox.admin.types, and emit's cached read of the schemas)."""

from __future__ import annotations

# Emit's refresh: the catalog version, and the types only when the version differs from the
# one the process holds (one row, one round trip; the types as JSON text, decoded by outbox
# whatever json codec the caller's connection has).
CATALOG_READ = """
SELECT c.version,
       CASE WHEN c.version IS DISTINCT FROM %s::bigint THEN (
           SELECT coalesce(json_agg(json_build_object(
                      'name', t.name, 'schema', t.json_schema, 'deprecated', t.deprecated)),
                  '[]'::json)::text
             FROM {schema}.event_types t)
       END
  FROM {schema}.event_catalog c
"""

TYPE_COLUMNS = """
    name, description, json_schema, example, deprecated, tenants, created_at, updated_at
"""

TYPE_INSERT = (
    """
INSERT INTO {schema}.event_types (name, description, json_schema, example, tenants)
VALUES (%(name)s, %(description)s, %(json_schema)s::jsonb, %(example)s::jsonb,
        %(tenants)s::text[])
ON CONFLICT (name) DO NOTHING
RETURNING"""
    + TYPE_COLUMNS
)

TYPE_UPSERT = (
    """
INSERT INTO {schema}.event_types (name, description, json_schema, example)
VALUES (%(name)s, %(description)s, %(json_schema)s::jsonb, %(example)s::jsonb)
ON CONFLICT (name) DO UPDATE
   SET description = EXCLUDED.description, json_schema = EXCLUDED.json_schema,
       example = EXCLUDED.example, updated_at = now()
 WHERE (event_types.description, event_types.json_schema, event_types.example)
       IS DISTINCT FROM (EXCLUDED.description, EXCLUDED.json_schema, EXCLUDED.example)
RETURNING"""
    + TYPE_COLUMNS
)

TYPE_LIST = "SELECT" + TYPE_COLUMNS + "FROM {schema}.event_types ORDER BY name"

# The types the portal offers one tenant.
TYPE_LIST_TENANT = (
    "SELECT" + TYPE_COLUMNS + "FROM {schema}.event_types"
    " WHERE tenants IS NULL OR %s = ANY (tenants) ORDER BY name"
)

TYPE_GET = "SELECT" + TYPE_COLUMNS + "FROM {schema}.event_types WHERE name = %s"

TYPE_GET_FOR_UPDATE = TYPE_GET + " FOR UPDATE"

TYPE_UPDATE = (
    """
UPDATE {schema}.event_types
   SET description = %(description)s, json_schema = %(json_schema)s::jsonb,
       example = %(example)s::jsonb, deprecated = %(deprecated)s,
       tenants = %(tenants)s::text[], updated_at = now()
 WHERE name = %(name)s
RETURNING"""
    + TYPE_COLUMNS
)

TYPE_DELETE = "DELETE FROM {schema}.event_types WHERE name = %s RETURNING name"
