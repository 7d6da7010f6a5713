"""A PgBouncer (Debian's ``pgbouncer`` package) in front of the test server, started by
the test on a free port: transaction pooling, few server connections, so clients share
them as they would in production."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

import psycopg

from tests.support.net import free_port


class PgBouncer:
    """``with PgBouncer(server_url) as pb: pb.url(db_url)`` -- ``db_url`` through it."""

    def __init__(self, server_url: str, *, pool_size: int = 4,
                 databases: dict[str, str] | None = None) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed: run `python3 deploy/dev.py test`"
                               " (it installs Debian's pgbouncer) or apt-get install pgbouncer")
        server = urlsplit(server_url)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="outbox-pgbouncer-"))
        extra = "".join(f"{alias} = host={server.hostname} port={server.port or 5432}"
                        f" dbname={name} pool_size=1\n"
                        for alias, name in (databases or {}).items())
        (self.dir / "users.txt").write_text('"postgres" ""\n"root" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n" + extra
            + f"* = host={server.hostname} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
            "max_client_conn = 500\nserver_lifetime = 3600\nserver_idle_timeout = 600\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\npidfile = {self.dir / 'pgbouncer.pid'}\n")
        user = pwd.getpwnam("postgres")
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        for f in self.dir.iterdir():
            os.chown(f, user.pw_uid, user.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen([*as_user, binary, str(self.dir / "pgbouncer.ini")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready(server_url)

    def _wait_ready(self, server_url: str) -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                with psycopg.connect(self.url(server_url), connect_timeout=2,
                                     prepare_threshold=None) as c:
                    c.execute("SELECT 1")
                    return
            except psycopg.Error as exc:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    log = self.log()[-2000:]
                    self.close()
                    raise RuntimeError(f"pgbouncer did not start: {log}") from exc
                time.sleep(0.1)

    def url(self, db_url: str) -> str:
        """``db_url`` with its host and port replaced by PgBouncer's."""
        parts = urlsplit(db_url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
