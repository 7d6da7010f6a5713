"""Sustained volume: table size, claim latency, emit cost and WAL per event over a long run.

    .venv/bin/python -m bench.history_volume [--quick] [--rate 1000] [--seconds 600]
        [--retention 60] [--partition-seconds 10] [--reference main] [--rounds 1]
        [--autovacuum off|on|both] [--breakdown]

Per run, on a scratch database: two ``outbox worker`` processes deliver to a local sink
(bench/sink.py) while this process emits ``--rate`` events/s (``emit_many`` every 0.1 s,
~200-byte payloads), with ``OUTBOX_RETENTION_SECONDS=--retention`` (pruning every
``--prune-interval`` s) and, if given, ``OUTBOX_PARTITION_SECONDS`` (ignored by a layout
without that setting). Every ``--sample`` seconds it records:

- the total size of the schema's tables (``pg_total_relation_size``: heap, indexes, TOAST;
  every partition is a table of its own, so they are counted too);
- claim latency: a side probe runs the layout's own CLAIM statement (limit 10) every 0.5 s
  in a transaction it rolls back; p99 per third of the run;
- emit cost: seconds per event of the ``emit_many`` + commit calls;
- WAL: the records of this database only (pg_walinspect over the window's LSN range:
  records whose block reference names this database, and every record of a transaction
  that wrote one, its commit included; the probe's own transactions are left out), per
  event emitted. The server's whole WAL (``pg_current_wal_lsn`` difference, other
  databases included) is reported beside it.

"Steady" figures are over the windows after the first retention period (pruning under way),
so they include the prune's deletes and VACUUMs. Size flatness is the mean size over the last
third of the run vs the middle third; p99 flatness likewise.

Layouts. ``--reference REV`` measures a git revision of this repository (``git archive``
into a temporary directory: its migrations, its worker and its CLAIM) in the same run,
interleaved with this checkout, ``--rounds`` times each; the figures are medians over the
rounds and the ratios this checkout / the reference. The emitting code is this checkout's
for both (the emit statement is the same). ``--autovacuum on`` turns the server's autovacuum
on for those runs (ALTER SYSTEM + pg_reload_conf) and restores the previous setting
afterwards, whatever happens; with it off the worker's pruner VACUUMs the queue tables
itself after each prune (that is the product's behaviour). ``--breakdown`` prints where the
WAL goes: bytes per event by resource manager, record type and relation, and full-page
images.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

import outbox
from bench.common import SCHEMA, emit_json
from bench.procs import ROOT, Workers
from bench.sink import Sink
from outbox.settings import mask_url
from outbox.testing import postgres

PROBE_LIMIT = 10
PROBE_EVERY = 0.5

SIZE = """
SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
  FROM pg_class c WHERE c.relnamespace = %s::regnamespace AND c.relkind IN ('r', 'm')
"""
# One window of this database's WAL, grouped. ``blk`` is the first block reference's
# database and relfilenode; a record counts when its block is in this database, or when
# its transaction wrote such a record (its commit record and any block-less record).
WAL_WINDOW = """
WITH r AS MATERIALIZED (
    SELECT w.resource_manager AS rmgr, w.record_type AS rtype, w.xid::text::bigint AS xid,
           w.record_length AS len, w.fpi_length AS fpi,
           regexp_match(w.block_ref, 'rel \\d+/(\\d+)/(\\d+)') AS blk
      FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn) w),
mine AS (SELECT DISTINCT xid FROM r WHERE blk[1]::oid = %(db)s AND xid <> 0)
SELECT r.rmgr, r.rtype, r.xid, COALESCE(c.relname, CASE WHEN r.blk IS NULL THEN '-'
                                                     ELSE 'other' END) AS rel,
       count(*), sum(r.len)::bigint, sum(r.fpi)::bigint, count(*) FILTER (WHERE r.fpi > 0)
  FROM r LEFT JOIN pg_class c ON r.blk[1]::oid = %(db)s AND c.relfilenode = r.blk[2]::oid
 WHERE (r.blk[1]::oid = %(db)s OR r.xid IN (SELECT xid FROM mine)
        OR r.xid = ANY (%(carry)s::bigint[]))
 GROUP BY 1, 2, 3, 4
"""


@dataclass
class Layout:
    """A schema + worker version: this checkout (tree None) or an exported revision."""

    name: str
    tree: Path | None = None

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.tree)} if self.tree else {}

    def python(self, code: str, url: str = "") -> str:
        env = {**os.environ, **self.env(), "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA}
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=self.tree or ROOT,
                             check=True, capture_output=True, text=True)
        return out.stdout


def _export(rev: str, into: Path) -> Path:
    """``git archive REV`` of this repository, unpacked into ``into``."""
    tar = into / "tree.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(tar), rev], cwd=ROOT, check=True)
    with tarfile.open(tar) as t:
        t.extractall(into / "tree", filter="fully_trusted")
    # The repository keeps migrations/ at its root and installs it as outbox.migrations; an
    # editable install maps that name to this checkout's migrations/, which the export's
    # own must shadow (found first on the export's PYTHONPATH, as outbox/delivery is).
    link = into / "tree" / "outbox" / "migrations"
    if not link.exists():
        link.symlink_to(Path("..") / "migrations")
    return into / "tree"


_MIGRATE = ("import os, psycopg; from outbox.admin.migrations import migrate; import outbox; "
            "assert outbox.__file__.startswith(os.getcwd()), outbox.__file__; "
            "import outbox.migrations as m; "
            "assert m.__file__.startswith(os.getcwd()), m.__file__; "
            "c = psycopg.connect(os.environ['OUTBOX_DATABASE_URL'], autocommit=True); "
            "migrate(c, os.environ['OUTBOX_SCHEMA'])")
# The endpoint is registered by the layout's own code (the columns it writes are its
# schema's).
_ADD_ENDPOINT = ("import os, psycopg; from outbox.admin import endpoints as ep; "
                 "c = psycopg.connect(os.environ['OUTBOX_DATABASE_URL'], autocommit=True); "
                 "ep.add(c, {url!r}, schema=os.environ['OUTBOX_SCHEMA'])")
_CLAIM = ("from outbox._db.connection import render; from outbox.delivery import queries; "
          "import os; print(render(queries.CLAIM, os.environ['OUTBOX_SCHEMA']), end='')")


SERVER: list[str] = []  # the server every run uses (main() sets it)


def private_server(checkpoint_timeout: float) -> str:
    """A PostgreSQL of this bench's own (initdb in a temporary directory, stopped at exit):
    no other database's checkpoints (a shared server's CREATE/DROP DATABASE each force one,
    and every page touched after a checkpoint is logged whole), and autovacuum can be
    switched without touching anyone else's."""
    url = postgres.TempCluster().url
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(sql.SQL("ALTER SYSTEM SET checkpoint_timeout = {}").format(
            sql.Literal(f"{int(checkpoint_timeout)}s")))
        c.execute("SELECT pg_reload_conf()")
    return url


@contextlib.contextmanager
def _database(layout: Layout) -> Iterator[str]:
    server = SERVER[0]
    name = f"outbox_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = urlunsplit(urlsplit(server)._replace(path="/" + name))
    try:
        layout.python(_MIGRATE, url)
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(name)))


@contextlib.contextmanager
def autovacuum(on: bool, url: str) -> Iterator[None]:
    """The server's autovacuum as asked for the block; the previous setting restored after
    it (an ALTER SYSTEM value put back, or reset to the configuration file's)."""
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT current_setting('autovacuum') = 'on',"
                        " (SELECT setting FROM pg_file_settings WHERE name = 'autovacuum'"
                        "   AND sourcefile LIKE '%%postgresql.auto.conf' AND applied)").fetchone()
        assert row is not None
        was_on, altered = row
        if was_on == on:
            yield
            return
        c.execute(sql.SQL("ALTER SYSTEM SET autovacuum = {}").format(
            sql.SQL("on" if on else "off")))
        c.execute("SELECT pg_reload_conf()")
    try:
        time.sleep(1.0)
        yield
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET autovacuum" if altered is None else
                      sql.SQL("ALTER SYSTEM SET autovacuum = {}").format(sql.Literal(altered)))
            c.execute("SELECT pg_reload_conf()")


@dataclass
class Shared:
    """State the emitter, the probe and the sampler share."""

    emitted: int = 0
    emit_cost: list[tuple[float, float]] = field(default_factory=list)  # (t, s/event)
    probes: list[tuple[float, float]] = field(default_factory=list)  # (t, seconds)
    probe_xids: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)


def _probe(url: str, claim: str, sh: Shared, start: float) -> None:
    try:
        with psycopg.connect(url) as conn:
            while not sh.stop.wait(PROBE_EVERY):
                params = {"limit": PROBE_LIMIT, "lease": 30.0, "token": uuid.uuid4(),
                          "used_ids": [], "used_counts": [], "default_cap": 1000,
                          "floor": 0,  # the partitioned claim's floor (0: every partition)
                          "after": None}  # its rotation position (an older CLAIM ignores it)
                with conn.transaction(force_rollback=True):
                    xid = conn.execute("SELECT txid_current()").fetchone()
                    t0 = time.perf_counter()
                    conn.execute(claim.encode(), params).fetchall()
                    took = time.perf_counter() - t0
                sh.probe_xids.add(int(xid[0]) if xid else 0)
                sh.probes.append((time.monotonic() - start, took))
    except Exception as exc:  # reported in the results
        sh.errors.append(f"probe: {exc}")


@dataclass
class Wal:
    """This database's WAL, summed over the windows read so far."""

    db: int
    carry: list[int] = field(default_factory=list)
    by_kind: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)

    def window(self, conn: psycopg.Connection[Any], start: str, end: str,
               skip: set[int]) -> tuple[int, int]:
        rows = conn.execute(WAL_WINDOW, {"start": start, "end": end, "db": self.db,
                                         "carry": self.carry}).fetchall()
        total = fpi = 0
        xids: set[int] = set()
        for rmgr, rtype, xid, rel, n, length, fpi_len, fpis in rows:
            if xid in skip:
                continue
            if xid:
                xids.add(xid)
            total += length
            fpi += fpi_len
            acc = self.by_kind.setdefault((rmgr, rtype, rel), [0, 0, 0, 0])
            for i, v in enumerate((n, length, fpi_len, fpis)):
                acc[i] += v
        self.carry = sorted(xids)[-5000:]  # a commit may fall in the next window
        return total, fpi


def _sample(url: str, sh: Shared, start: float, every: float,
            samples: list[dict[str, Any]], wal: Wal) -> None:
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            # A temporary physical slot keeps the window's WAL until it is read (other
            # databases' checkpoints would recycle it); advanced after each window, dropped
            # with this session.
            conn.execute("SELECT pg_create_physical_replication_slot(%s, true, true)",
                         (f"bench_volume_{uuid.uuid4().hex[:8]}",))
            lsn = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
            server0 = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert lsn and server0
            prev, prev_server, prev_n = lsn[0], server0[0], 0
            while not sh.stop.wait(every):
                _one_sample(conn, sh, start, samples, wal, (prev, prev_server, prev_n))
                last = samples[-1]
                prev, prev_server, prev_n = last["lsn"], last["server_lsn"], last["emitted"]
    except Exception as exc:  # reported in the results
        sh.errors.append(f"sampler: {exc}")


def _one_sample(conn: psycopg.Connection[Any], sh: Shared, start: float,
                samples: list[dict[str, Any]], wal: Wal, prev: tuple[str, str, int]) -> None:
    t = time.monotonic() - start
    n = sh.emitted
    row = conn.execute("SELECT pg_current_wal_flush_lsn()::text, pg_current_wal_lsn()::text,"
                       " pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)::bigint",
                       (prev[1],)).fetchone()
    assert row is not None
    lsn, server_lsn, server_bytes = row
    size_row = conn.execute(SIZE, (SCHEMA,)).fetchone()
    pending = conn.execute(
        "SELECT count(*) FROM outbox.deliveries WHERE state <> 'delivered' AND state <> 'dead'"
    ).fetchone()
    mine, fpi = wal.window(conn, prev[0], lsn, sh.probe_xids)
    conn.execute("SELECT pg_replication_slot_advance(slot_name, %s::pg_lsn)"
                 " FROM pg_replication_slots WHERE active_pid = pg_backend_pid()", (lsn,))
    events = max(n - prev[2], 1)
    s = {"t": round(t, 1), "emitted": n, "lsn": lsn, "server_lsn": server_lsn,
         "mb": (size_row[0] if size_row else 0) / 2**20,
         "undelivered": pending[0] if pending else 0, "wal_bytes": mine, "fpi_bytes": fpi,
         "events": n - prev[2], "wal_per_event": mine / events,
         "server_wal_per_event": server_bytes / events}
    samples.append(s)
    print(f"  t={t:6.1f}s  tables {s['mb']:7.1f} MB  undelivered {s['undelivered']:>6,}"
          f"  WAL {s['wal_per_event']:7.0f} B/event (FPI {fpi / events:5.0f})"
          f"  server {s['server_wal_per_event']:7.0f}", file=sys.stderr)


@dataclass
class Config:
    rate: int
    seconds: float
    retention: float
    prune_interval: float
    sample: float
    partition_seconds: float | None


def run_one(layout: Layout, cfg: Config, av: bool, claim: str) -> dict[str, Any]:
    """One run of one layout; the figures of one round."""
    env = {"OUTBOX_RETENTION_SECONDS": str(cfg.retention),
           "OUTBOX_PRUNE_INTERVAL_SECONDS": str(cfg.prune_interval),
           "OUTBOX_LOG_LEVEL": "WARNING", **layout.env()}
    if cfg.partition_seconds:
        env["OUTBOX_PARTITION_SECONDS"] = str(cfg.partition_seconds)
    samples: list[dict[str, Any]] = []
    sh = Shared()
    with _database(layout) as url, autovacuum(av, url), Sink() as sink:
        layout.python(_ADD_ENDPOINT.format(url=sink.url + "/r"), url)
        with psycopg.connect(url, autocommit=True) as c:
            db = c.execute("SELECT oid FROM pg_database WHERE datname = current_database()"
                           ).fetchone()
        assert db is not None
        wal = Wal(int(db[0]))
        with Workers(url, 2, env, drain=False, cwd=layout.tree) as workers:
            start = time.monotonic()
            threads = [threading.Thread(target=_probe, args=(url, claim, sh, start)),
                       threading.Thread(target=_sample,
                                        args=(url, sh, start, cfg.sample, samples, wal))]
            for th in threads:
                th.start()
            try:
                _emit(url, cfg, sh, start, workers)
            finally:
                sh.stop.set()
                for th in threads:
                    th.join()
    return _summary(layout, cfg, av, samples, sh, wal, sink.report.requests)


def _emit(url: str, cfg: Config, sh: Shared, start: float, workers: Workers) -> None:
    per_tick = max(1, cfg.rate // 10)
    pad = "x" * 170
    with psycopg.connect(url) as conn:
        tick = start
        while (now := time.monotonic()) - start < cfg.seconds:
            events = [outbox.Event("volume.test", {"i": sh.emitted + i, "pad": pad})
                      for i in range(per_tick)]
            t0 = time.perf_counter()
            outbox.emit_many(conn, events)
            conn.commit()
            sh.emit_cost.append((now - start, (time.perf_counter() - t0) / per_tick))
            sh.emitted += per_tick
            if int(now - start) % 5 == 0:
                workers.check()
            tick += 0.1
            time.sleep(max(0.0, tick - time.monotonic()))


def _thirds(values: list[tuple[float, float]], seconds: float) -> tuple[list[float], list[float]]:
    mid = [v for t, v in values if seconds / 3 <= t < 2 * seconds / 3]
    end = [v for t, v in values if t >= 2 * seconds / 3]
    return mid, end


def _p99(xs: list[float]) -> float:
    if len(xs) < 2:
        return xs[0] if xs else 0.0
    return statistics.quantiles(sorted(xs), n=100, method="inclusive")[98]


def _summary(layout: Layout, cfg: Config, av: bool, samples: list[dict[str, Any]],
             sh: Shared, wal: Wal, received: int) -> dict[str, Any]:
    steady = [s for s in samples if s["t"] > cfg.retention + cfg.prune_interval]
    sizes = [(s["t"], s["mb"]) for s in samples]
    mid_mb, end_mb = _thirds(sizes, cfg.seconds)
    mid_p, end_p = _thirds(sh.probes, cfg.seconds)
    ev = sum(s["events"] for s in steady) or 1
    return {
        "layout": layout.name, "autovacuum": av, "emitted": sh.emitted, "received": received,
        "undelivered_at_end": samples[-1]["undelivered"] if samples else None,
        "samples": samples, "errors": sh.errors,
        "size_middle_mb": statistics.mean(mid_mb) if mid_mb else 0.0,
        "size_end_mb": statistics.mean(end_mb) if end_mb else 0.0,
        "size_end_vs_middle": (statistics.mean(end_mb) / statistics.mean(mid_mb))
        if mid_mb and end_mb else 0.0,
        "claim_p99_middle_ms": _p99(mid_p) * 1000, "claim_p99_end_ms": _p99(end_p) * 1000,
        "claim_p99_end_vs_middle": _p99(end_p) / _p99(mid_p) if mid_p and end_p else 0.0,
        "claim_p50_ms": statistics.median([v for _, v in sh.probes]) * 1000
        if sh.probes else 0.0,
        "emit_us_per_event": statistics.median([v for _, v in sh.emit_cost]) * 1e6,
        "wal_bytes_per_event": sum(s["wal_bytes"] for s in steady) / ev,
        "fpi_bytes_per_event": sum(s["fpi_bytes"] for s in steady) / ev,
        "server_wal_bytes_per_event": statistics.median(
            [s["server_wal_per_event"] for s in steady]) if steady else 0.0,
        "breakdown": {"|".join(k): v for k, v in wal.by_kind.items()},
        "breakdown_events": sum(s["events"] for s in samples),
    }


def breakdown(res: dict[str, Any], top: int = 40) -> list[str]:
    """Lines: bytes per event by (resource manager, record type, relation), largest first."""
    n = max(res["breakdown_events"], 1)
    rows = sorted(res["breakdown"].items(), key=lambda kv: -kv[1][1])
    total = sum(v[1] for _, v in rows)
    out = [f"  {'rmgr/record':<28} {'relation':<34} {'rec/ev':>7} {'B/ev':>7} {'FPI B/ev':>8}"
           f"  share"]
    for key, (cnt, length, fpi, _fpis) in rows[:top]:
        rmgr, rtype, rel = key.split("|")
        out.append(f"  {rmgr + '/' + rtype:<28} {rel:<34} {cnt / n:7.2f} {length / n:7.0f}"
                   f" {fpi / n:8.0f}  {length / max(total, 1):5.1%}")
    out.append(f"  {'total':<63} {total / n:7.0f}")
    return out


KEYS = ("wal_bytes_per_event", "fpi_bytes_per_event", "server_wal_bytes_per_event",
        "emit_us_per_event", "size_end_vs_middle", "claim_p99_middle_ms", "claim_p99_end_ms",
        "claim_p99_end_vs_middle", "claim_p50_ms")


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median([r[k] for r in runs]) for k in KEYS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="90 s at the rate, 20 s retention, 5 s samples: a smoke run")
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=None)
    p.add_argument("--retention", type=float, default=None)
    p.add_argument("--prune-interval", type=float, default=5.0)
    p.add_argument("--partition-seconds", type=float, default=None)
    p.add_argument("--sample", type=float, default=None)
    p.add_argument("--reference", default=None, help="git revision measured beside this tree")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--autovacuum", choices=["off", "on", "both"], default="both")
    p.add_argument("--breakdown", action="store_true")
    p.add_argument("--server", default=os.environ.get("OUTBOX_BENCH_DATABASE_URL"),
                   help="an existing PostgreSQL (default: a private one, started and stopped"
                        " here; see private_server)")
    p.add_argument("--checkpoint-timeout", type=float, default=None,
                   help="of the private server, seconds (default 300, --quick 60)")
    a = p.parse_args()
    q = a.quick
    cfg = Config(rate=a.rate, seconds=a.seconds or (90.0 if q else 600.0),
                 retention=a.retention or (20.0 if q else 60.0),
                 prune_interval=a.prune_interval, sample=a.sample or (5.0 if q else 10.0),
                 partition_seconds=a.partition_seconds)
    if cfg.rate < 10 or cfg.seconds <= cfg.retention:
        p.error("--rate must be >= 10 and --seconds longer than --retention")
    modes = {"off": [False], "on": [True], "both": [False, True]}[a.autovacuum]
    a.checkpoint_timeout = a.checkpoint_timeout or (60.0 if q else 300.0)
    SERVER.append(postgres.find_or_start(a.server) if a.server
                  else private_server(a.checkpoint_timeout))
    with tempfile.TemporaryDirectory(prefix="volume-ref-") as tmp:
        layouts = [Layout("this tree")]
        if a.reference:
            layouts.insert(0, Layout(f"reference {a.reference}", _export(a.reference, Path(tmp))))
        claims = {lay.name: lay.python(_CLAIM) for lay in layouts}
        runs = _rounds(layouts, cfg, modes, a.rounds, claims, a.breakdown)
    _report(cfg, layouts, modes, runs, a)


def _rounds(layouts: list[Layout], cfg: Config, modes: list[bool], rounds: int,
            claims: dict[str, str], show: bool) -> list[dict[str, Any]]:
    runs = []
    for r in range(rounds):
        for av in modes:
            for lay in layouts:
                print(f"round {r + 1}/{rounds}, {lay.name}, autovacuum {'on' if av else 'off'}",
                      file=sys.stderr)
                res = run_one(lay, cfg, av, claims[lay.name])
                res["round"] = r
                runs.append(res)
                if show:
                    print("\n".join(breakdown(res)), file=sys.stderr)
    return runs


def _report(cfg: Config, layouts: list[Layout], modes: list[bool], runs: list[dict[str, Any]],
            a: argparse.Namespace) -> None:
    where = (f"server {mask_url(a.server)}" if a.server else
             f"private server, checkpoint_timeout {a.checkpoint_timeout:.0f} s")
    print(f"{cfg.rate} events/s for {cfg.seconds:.0f} s, retention {cfg.retention:.0f} s, "
          f"prune every {cfg.prune_interval:.0f} s, 2 workers, {a.rounds} round(s), {where};"
          " medians")
    table: dict[str, Any] = {}
    for av in modes:
        for lay in layouts:
            sel = [r for r in runs if r["layout"] == lay.name and r["autovacuum"] == av]
            m = _medians(sel)
            table[f"{lay.name}, autovacuum {'on' if av else 'off'}"] = m
            print(f"{lay.name:<24} autovacuum {'on ' if av else 'off'}"
                  f"  WAL {m['wal_bytes_per_event']:6.0f} B/event (FPI"
                  f" {m['fpi_bytes_per_event']:5.0f})  emit {m['emit_us_per_event']:6.1f} us/event"
                  f"  size end/middle {m['size_end_vs_middle']:.2f}x  claim p99 middle"
                  f" {m['claim_p99_middle_ms']:.1f} ms, end {m['claim_p99_end_ms']:.1f} ms"
                  f" ({m['claim_p99_end_vs_middle']:.2f}x)")
        if len(layouts) == 2:
            ref = table[f"{layouts[0].name}, autovacuum {'on' if av else 'off'}"]
            cur = table[f"{layouts[1].name}, autovacuum {'on' if av else 'off'}"]
            ratios = {k: cur[k] / ref[k] if ref[k] else 0.0 for k in
                      ("wal_bytes_per_event", "emit_us_per_event")}
            table[f"ratio, autovacuum {'on' if av else 'off'}"] = ratios
            print(f"  this tree / reference: WAL/event {ratios['wal_bytes_per_event']:.2f}x"
                  f" (target <= 0.8x), emit {ratios['emit_us_per_event']:.2f}x"
                  " (target <= 1.05x)")
    emit_json("history_volume", {"config": cfg.__dict__, "reference": a.reference,
                                 "server": "given" if a.server else "private",
                                 "checkpoint_timeout": a.checkpoint_timeout,
                                 "medians": table, "runs": runs})


if __name__ == "__main__":
    main()
