"""The reference floor for a worker's CPU per delivery: the same hot path, nothing else.

    .venv/bin/python -m bench.bareloop DATABASE_URL [--schema outbox] [--batch 100]

One process, one connection, plain asyncio (as ``outbox worker``): claim up to ``--batch``
due deliveries with ``FOR UPDATE SKIP LOCKED`` (a lease and a token, as the worker's
claim), sign each with the Standard Webhooks HMAC, POST each once with one keep-alive
``aiohttp`` session (all of a claim's POSTs at once), then record the claim in one
``unnest`` statement (the deliveries' new state and one ``delivery_attempts`` row each).
It exits when a claim finds nothing and prints ``claimed=N delivered=N`` on stderr, as a
``--drain`` worker does. This is a floor to compare against (``bench.cpu``), not a
design: no SSRF guard, no timeouts beyond aiohttp's, no fencing, no retries, no
fairness, no response cap, no metrics, no error handling.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import sys
import time
import uuid
from typing import Any

import aiohttp
import psycopg

CLAIM = """
WITH c AS (
    SELECT id FROM {schema}.deliveries
     WHERE state = 'pending' AND visible_at <= now()
     ORDER BY visible_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
u AS (
    UPDATE {schema}.deliveries d
       SET visible_at = now() + interval '30 seconds', attempts = d.attempts + 1,
           lease_token = %(token)s
      FROM c WHERE d.id = c.id
    RETURNING d.id, d.event_id, d.endpoint_id, d.attempts)
SELECT u.id, u.attempts, e.id::text, e.payload::text, p.url, p.secret
  FROM u JOIN {schema}.events e ON e.id = u.event_id
  JOIN {schema}.endpoints p ON p.id = u.endpoint_id
"""

COMPLETE = """
WITH r AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(statuses)s::int[],
                         %(durations)s::float8[]) AS r(id, attempt, status, duration)),
upd AS (
    UPDATE {schema}.deliveries d
       SET state = CASE WHEN r.status BETWEEN 200 AND 299 THEN 'delivered' ELSE 'pending' END,
           lease_token = NULL, last_status = r.status,
           finished_at = CASE WHEN r.status BETWEEN 200 AND 299 THEN now() END
      FROM r WHERE d.id = r.id
    RETURNING d.id)
INSERT INTO {schema}.delivery_attempts (delivery_id, attempt, outcome, status_code,
                                        duration_ms, worker)
SELECT r.id, r.attempt, CASE WHEN r.status BETWEEN 200 AND 299 THEN 'delivered'
                              ELSE 'retry' END, r.status, r.duration, 'bareloop'
  FROM r
"""


def _key(secret: str, keys: dict[str, bytes]) -> bytes:
    key = keys.get(secret)
    if key is None:
        raw = secret.removeprefix("whsec_")
        key = keys[secret] = base64.b64decode(raw + "=" * (-len(raw) % 4))
    return key


async def _post(session: aiohttp.ClientSession, row: tuple[Any, ...],
                keys: dict[str, bytes]) -> tuple[int, float]:
    _id, _attempt, msg_id, payload, url, secret = row
    body = payload.encode()
    ts = str(int(time.time()))
    mac = hmac.new(_key(secret, keys), f"{msg_id}.{ts}.".encode() + body, hashlib.sha256)
    headers = {"webhook-id": msg_id, "webhook-timestamp": ts,
               "webhook-signature": "v1," + base64.b64encode(mac.digest()).decode(),
               "content-type": "application/json"}
    started = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as response:
        await response.read()
        return response.status, (time.perf_counter() - started) * 1000.0


async def run(url: str, schema: str, batch: int) -> dict[str, int]:
    claim, complete = CLAIM.format(schema=schema), COMPLETE.format(schema=schema)
    keys: dict[str, bytes] = {}
    stats = {"claimed": 0, "delivered": 0}
    connector = aiohttp.TCPConnector(limit=batch)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn, \
            aiohttp.ClientSession(connector=connector) as session:
        while True:
            cur = await conn.execute(claim, {"limit": batch, "token": uuid.uuid4()})
            rows = await cur.fetchall()
            if not rows:
                return stats
            results = await asyncio.gather(*(_post(session, row, keys) for row in rows))
            await conn.execute(complete, {
                "ids": [r[0] for r in rows], "attempts": [r[1] for r in rows],
                "statuses": [s for s, _ in results], "durations": [d for _, d in results]})
            stats["claimed"] += len(rows)
            stats["delivered"] += sum(200 <= s <= 299 for s, _ in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database_url")
    parser.add_argument("--schema", default="outbox")
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    stats = asyncio.run(run(args.database_url, args.schema, args.batch))
    print(" ".join(f"{k}={v}" for k, v in stats.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
