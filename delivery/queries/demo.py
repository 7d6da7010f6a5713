"""`outbox demo` (outbox.delivery.demo): its own schema, recreated each run."""

from __future__ import annotations

# --- `outbox demo` (outbox.delivery.demo): its own schema, recreated each run ----------
DEMO_DROP_SCHEMA = "DROP SCHEMA IF EXISTS {schema} CASCADE"
DEMO_CREATE_ORDERS = "CREATE TABLE {schema}.demo_orders (id int PRIMARY KEY, total int)"
DEMO_INSERT_ORDER = "INSERT INTO {schema}.demo_orders VALUES (%s, %s)"
DEMO_PENDING = "SELECT count(*) FROM {schema}.deliveries WHERE state = 'pending'"
DEMO_SUMMARY = """
SELECT state, count(*) AS deliveries, sum(attempts) AS attempts
  FROM {schema}.deliveries GROUP BY state ORDER BY state
"""
