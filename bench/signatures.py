"""Ed25519 (``v1a``) against HMAC (``v1``) signing: what the scheme costs a worker.

    .venv/bin/python -m bench.signatures [--events 5000] [--rounds 3] [--concurrency 100]

- Signing alone: ``outbox.signing.signature_header`` of a ~400-byte body with one HMAC
  secret, one Ed25519 key and two Ed25519 keys (a rotation), 7 runs of 2,000 each: the
  median microseconds per header.
- End to end: ``bench.deliver.throughput`` (one ``outbox worker --drain`` process, a fresh
  scratch database and aiohttp sink each time) drains ``--events`` deliveries to an hmac
  endpoint, then to an ed25519 one, alternating for ``--rounds`` rounds: deliveries/s and
  the worker's CPU microseconds per delivery, medians, and ed25519's ratio to hmac.

Human-readable lines, then one JSON line (``bench.common.emit_json``).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import timeit
from typing import Any

from bench.common import emit_json
from bench.deliver import throughput
from outbox.signing import generate_key_pair, generate_secret, signature_header

BODY = b'{"type":"invoice.paid","data":{"n":1}}' * 10


def signing() -> dict[str, float]:
    """Median microseconds per ``webhook-signature`` header, by scheme."""
    cases = {"hmac": [generate_secret()], "ed25519": [generate_key_pair()[0]],
             "ed25519_rotation": [generate_key_pair()[0], generate_key_pair()[0]]}
    out = {}
    for name, secrets in cases.items():
        signature_header(secrets, "m", 1, BODY)  # decode and remember the keys first
        timer = timeit.Timer(functools.partial(signature_header, secrets, "msg_0193",
                                               1_700_000_000, BODY))
        runs = [timer.timeit(number=2000) / 2000 for _ in range(7)]
        out[name] = 1e6 * statistics.median(runs)
        print(f"sign {name:18} {out[name]:8.1f} us (median of 7 x 2,000)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    res: dict[str, Any] = {"events": args.events, "rounds": args.rounds, "sign_us": signing()}
    env = {"OUTBOX_CONCURRENCY": str(args.concurrency)}
    runs: dict[str, list[dict[str, Any]]] = {"hmac": [], "ed25519": []}
    for _ in range(args.rounds):
        for scheme, done in runs.items():
            t = throughput(args.events, 1, env, signature=scheme)
            done.append(t)
            print(f"{scheme:8} {t['deliveries_per_s']:8.0f} deliveries/s, worker "
                  f"{t['worker_cpu_us_per_delivery']:6.0f} us CPU per delivery")
    for scheme, rows in runs.items():
        res[scheme] = {key: statistics.median(r[key] for r in rows)
                       for key in ("deliveries_per_s", "worker_cpu_us_per_delivery")}
    res["ratio"] = {key: res["ed25519"][key] / res["hmac"][key] for key in res["hmac"]}
    print(f"medians: hmac {res['hmac']}, ed25519 {res['ed25519']}; ed25519/hmac "
          f"{ {k: round(v, 2) for k, v in res['ratio'].items()} }")
    emit_json("signatures", res)


if __name__ == "__main__":
    main()
