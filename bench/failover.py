"""Failover drill: a primary and a streaming replica, workers and an emitting app on a
multi-host URL, the primary crashed mid-drain and the replica promoted.

    .venv/bin/python -m bench.failover [--rounds 2] [--rate 150] [--before 4] [--lag 0.5]
        [--promote-after 1] [--after 4] [--modes async,sync,async-plain] [--filler-mb 1]

Each round builds both clusters in temporary directories (``initdb``, ``pg_basebackup -R``,
binaries from /usr/lib/postgresql/<newest>/bin), migrates, registers one endpoint on a
:class:`bench.sink.Sink`, starts two ``outbox worker`` processes and an emitter thread
(one event per transaction at ``--rate``/s; an event counts as *acknowledged* once its
COMMIT returned) beside a thread of bulk writes (``--filler-mb`` MB per transaction, so
the replica lags as behind a busy application); ``--lag`` s before the crash the
replica's WAL receiver is stopped (SIGSTOP: a slow network or a replica that fell behind;
SIGCONT after the crash), then after ``--before`` s in all it crashes the primary (``pg_ctl stop -m
immediate``), promotes the replica ``--promote-after`` s later, emits ``--after`` s more
and waits until every event the new primary holds is delivered. Modes:

- ``async``: asynchronous streaming replication; workers and emitter connect with
  ``target_session_attrs=read-write`` (both hosts listed).
- ``sync``: the same with ``synchronous_standby_names = '*'`` on the primary (a commit
  returns once the replica has flushed it).
- ``async-plain``: asynchronous, and the workers' URL lists both hosts *without*
  ``target_session_attrs``: they reach the read-only replica and must wait it out.

Per round: acknowledged commits lost (acknowledged, absent from the promoted replica),
of those how many the sink had received anyway (webhooks for commits that no longer
exist), duplicate requests, seconds from the crash and from the promotion to the first
delivery of an event emitted after the promotion, undelivered events, and the workers'
exit statuses (0: they stayed up). Workers run with a 10 s lease (claims in flight at
the crash that the replica saw come back after it). Medians over the rounds, then one
JSON line. The figures depend on load: a shared, noisy machine says so beside them.
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import outbox
from bench.common import emit_json
from bench.sink import Sink
from outbox.admin import endpoints
from outbox.admin.migrations import migrate
from outbox.errors import OutboxError

SCHEMA = "outbox"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if not found:
        raise SystemExit(f"{name} not found under /usr/lib/postgresql/*/bin")
    return found[0]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pair:
    """A primary and its streaming replica in a temporary directory."""

    def __init__(self, sync: bool) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="outbox-failover-"))
        self.ports = (_free_port(), _free_port())
        self._as = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        primary, replica = self.data(0), self.data(1)
        self._run(_bin("initdb"), "-D", primary, "-A", "trust", "-U", "postgres", "-E", "UTF8")
        # On the primary's command line, not ALTER SYSTEM: pg_basebackup copies
        # postgresql.auto.conf, and a promoted replica that waits for a standby of its own
        # hangs every commit.
        self.sync = sync
        self.start(0)
        self._run(_bin("pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.ports[0]),
                  "-U", "postgres", "-D", replica, "-R", "-X", "stream")
        self.start(1)

    def data(self, i: int) -> str:
        return str(self.dir / f"node{i}")

    def url(self, i: int) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[i]}/postgres"

    def multi(self, read_write: bool = True) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        attrs = "&target_session_attrs=read-write" if read_write else ""
        return f"postgresql://postgres@{hosts}/postgres?connect_timeout=2{attrs}"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=180)

    def start(self, i: int) -> None:
        opts = (f"-p {self.ports[i]} -k {self.dir} -c listen_addresses=127.0.0.1"
                " -c wal_level=replica -c max_wal_senders=5 -c hot_standby=on")
        if self.sync and i == 0:
            opts += " -c synchronous_standby_names=*"
        self._run(_bin("pg_ctl"), "-D", self.data(i), "-l", f"{self.data(i)}.log", "-o", opts,
                  "-w", "start")

    def wal_receiver(self) -> int:
        """The pid of the replica's WAL receiver."""
        with psycopg.connect(self.url(1), autocommit=True) as c:
            row = c.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
        if not row:
            raise RuntimeError("the replica is not streaming")
        return int(row[0])

    def crash_primary(self) -> None:
        self._run(_bin("pg_ctl"), "-D", self.data(0), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        self._run(_bin("pg_ctl"), "-D", self.data(1), "-w", "promote")

    def destroy(self) -> None:
        for i in (0, 1):
            subprocess.run([*self._as, _bin("pg_ctl"), "-D", self.data(i), "-m", "immediate",
                            "stop"], capture_output=True, timeout=60, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class Emitter(threading.Thread):
    """One event per transaction at ``rate``/s; ``acked``: event id -> commit time."""

    def __init__(self, url: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.url, self.rate = url, rate
        self.acked: dict[str, float] = {}
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        next_at = time.monotonic()
        while not self.stop.is_set():
            next_at += 1.0 / self.rate
            time.sleep(max(0.0, next_at - time.monotonic()))
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.url)
                event_id = outbox.emit(conn, outbox.Event("drill.tick", {"at": time.time()}))
                conn.commit()
                self.acked[str(event_id)] = time.time()
            except (psycopg.Error, OutboxError):
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
                next_at = time.monotonic()
        if conn is not None:
            conn.close()


class Filler(threading.Thread):
    """Bulk writes on the primary (``mb`` MB of WAL per transaction, back to back): the
    replica lags behind them as it would behind a busy application."""

    def __init__(self, url: str, mb: int) -> None:
        super().__init__(daemon=True)
        self.url, self.mb = url, mb
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as c:
                c.execute("CREATE TABLE IF NOT EXISTS public.filler (x text)")
                while not self.stop.is_set():
                    c.execute("INSERT INTO public.filler SELECT repeat(md5(g::text), 30)"
                              " FROM generate_series(1, %s) g", (self.mb * 1000,))
        except psycopg.Error:
            return  # the primary crashed


def _workers(url: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": SCHEMA,
           "OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8", "OUTBOX_METRICS_PORT": "0",
           "OUTBOX_LEASE_SECONDS": "10", "OUTBOX_HTTP_TIMEOUT_SECONDS": "5",
           "OUTBOX_LOG_FORMAT": "text", "OUTBOX_POLL_INTERVAL_SECONDS": "0.05"}
    return [subprocess.Popen([sys.executable, "-m", "outbox", "worker"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(2)]


def _present(url: str, ids: list[str]) -> set[str]:
    with psycopg.connect(url) as c:
        rows = c.execute(f"SELECT id::text FROM {SCHEMA}.events WHERE id = ANY(%s::uuid[])",
                         (ids,)).fetchall()
    return {r[0] for r in rows}


def _pending(url: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute(f"SELECT count(*) FROM {SCHEMA}.deliveries"
                        " WHERE state <> 'delivered'").fetchone()
    return int(row[0]) if row else -1


def _step(what: str) -> None:
    print(f"  {time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def drill(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    _step(f"{mode}: building primary and replica")
    pair = Pair(sync=mode == "sync")
    try:
        with psycopg.connect(pair.url(0), autocommit=True) as c:
            migrate(c, SCHEMA)
        with Sink() as sink:
            with psycopg.connect(pair.url(0), autocommit=True) as c:
                endpoints.add(c, sink.url + "/hook", schema=SCHEMA, secret=SECRET)
            workers = _workers(pair.multi(read_write=mode != "async-plain"))
            emitter = Emitter(pair.multi(), args.rate)
            try:
                timings = _run(pair, workers, emitter, mode, args)
            finally:
                emitter.stop.set()
                for w in workers:
                    if w.poll() is None:
                        w.kill()
        return _figures(pair, emitter, sink, *timings)
    finally:
        pair.destroy()


def _run(pair: Pair, workers: list[subprocess.Popen[bytes]], emitter: Emitter, mode: str,
         args: argparse.Namespace) -> tuple[float, float, int, list[int]]:
    """Emit, crash, promote, emit, drain: (crash time, promotion time, undelivered,
    worker exit statuses)."""
    filler = Filler(pair.url(0), args.filler_mb)
    if args.filler_mb:
        filler.start()
    emitter.start()
    time.sleep(max(0.0, args.before - args.lag))
    receiver = pair.wal_receiver()
    os.kill(receiver, signal.SIGSTOP)  # the replica stops receiving: replication lag
    time.sleep(args.lag)
    _step(f"{mode}: crashing the primary")
    crashed = time.time()
    pair.crash_primary()
    os.kill(receiver, signal.SIGCONT)
    filler.stop.set()
    time.sleep(args.promote_after)
    pair.promote()
    promoted = time.time()
    time.sleep(args.after)
    emitter.stop.set()
    emitter.join()
    _step(f"{mode}: waiting for the new primary's backlog")
    deadline = time.monotonic() + 60
    while _pending(pair.url(1)) and time.monotonic() < deadline:
        time.sleep(0.5)
    undelivered = _pending(pair.url(1))
    for w in workers:
        w.send_signal(signal.SIGTERM)
    statuses = [w.wait(timeout=60) for w in workers]
    return crashed, promoted, undelivered, statuses


def _figures(pair: Pair, emitter: Emitter, sink: Sink, crashed: float, promoted: float,
             undelivered: int, statuses: list[int]) -> dict[str, Any]:
    acked = list(emitter.acked)
    lost = set(acked) - _present(pair.url(1), acked)
    arrivals = sink.report.first_arrival
    after = [arrivals[i] for i, t in emitter.acked.items() if t > promoted and i in arrivals]
    first = min(after) if after else float("nan")
    return {"acknowledged": len(acked), "lost_acknowledged": len(lost),
            "lost_but_delivered": sum(1 for i in lost if i in arrivals),
            "duplicates": sink.report.duplicates, "emit_errors": emitter.errors,
            "resume_after_crash_s": round(first - crashed, 3),
            "resume_after_promotion_s": round(first - promoted, 3),
            "undelivered": undelivered, "worker_exit_statuses": statuses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=150.0)
    parser.add_argument("--before", type=float, default=4.0)
    parser.add_argument("--promote-after", type=float, default=1.0)
    parser.add_argument("--after", type=float, default=4.0)
    parser.add_argument("--modes", default="async,sync,async-plain")
    parser.add_argument("--lag", type=float, default=0.5,
                        help="seconds the replica receives nothing before the crash")
    parser.add_argument("--filler-mb", type=int, default=1,
                        help="MB of bulk writes per transaction beside the emits (0: none)")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for mode in args.modes.split(","):
        rounds = [drill(mode, args) for _ in range(args.rounds)]
        for r in rounds:
            print(f"{mode:12} {r}", flush=True)
        keys = [k for k, v in rounds[0].items() if isinstance(v, int | float)]
        results[mode] = {"rounds": rounds,
                         "median": {k: statistics.median(r[k] for r in rounds) for k in keys}}
        print(f"{mode:12} median {results[mode]['median']}", flush=True)
    emit_json("failover", results)


if __name__ == "__main__":
    main()
