"""Find a PostgreSQL for the demo and the tests, or start a throwaway one; make and drop
throwaway databases on it.

Order: the URL given (``OUTBOX_TEST_DATABASE_URL`` / ``DATABASE_URL``), the local server
on 127.0.0.1:5432, the machine's Debian cluster (``pg_ctlcluster ... start``), and last a
throwaway cluster made with ``initdb`` + ``pg_ctl`` in a temporary directory, stopped and
deleted at exit. Not for production use.

Databases: :func:`create_template` makes a migrated database once; :func:`create_database`
copies it (``CREATE DATABASE ... TEMPLATE``, a file copy: milliseconds, no migration per
test) under a random name, so runs can repeat and overlap; :func:`drop_database` drops one
even while connections to it are open (``WITH (FORCE)``).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from outbox.admin.migrations import migrate
from outbox.errors import ConfigurationError
from outbox.settings import mask_url

__all__ = [
    "LOCAL_URL",
    "TempCluster",
    "create_database",
    "create_template",
    "dbname",
    "drop_database",
    "find_or_start",
    "for_demo",
    "reachable",
    "with_dbname",
]

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def reachable(url: str, timeout: int = 2) -> bool:
    """True if a connection to ``url`` succeeds."""
    try:
        with psycopg.connect(url, connect_timeout=timeout, autocommit=True):
            return True
    except psycopg.Error:
        return False


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def _start_debian_cluster() -> bool:
    ctl = shutil.which("pg_ctlcluster")
    if not ctl or not Path("/etc/postgresql").is_dir():
        return False
    for version in sorted(os.listdir("/etc/postgresql"), reverse=True):
        subprocess.run(
            [ctl, "--skip-systemctl-redirect", version, "main", "start"],
            capture_output=True, check=False, timeout=60,
        )
    return reachable(LOCAL_URL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempCluster:
    """A private PostgreSQL cluster in a temporary directory (initdb + pg_ctl)."""

    def __init__(self) -> None:
        initdb, self.pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
        if not initdb or not self.pg_ctl:
            raise RuntimeError("no PostgreSQL found and no initdb/pg_ctl to start one")
        self.dir = Path(tempfile.mkdtemp(prefix="outbox-pg-"))
        self.port = _free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._run([initdb, "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres",
                   "--no-sync", "-E", "UTF8"])
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.start()
        atexit.register(self.destroy)

    def _run(self, args: list[str]) -> None:
        subprocess.run(self._as_user + args, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start (or restart after :meth:`stop`) the server and wait until it accepts."""
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        self._run([str(self.pg_ctl), "-D", str(self.dir / "data"), "-l",
                   str(self.dir / "log"), "-o", opts, "-w", "start"])

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast`` disconnects clients; ``immediate`` is a crash)."""
        self._run([str(self.pg_ctl), "-D", str(self.dir / "data"), "-m", mode, "-w", "stop"])

    def destroy(self) -> None:
        """Stop the server if running and delete its directory."""
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def find_or_start(url: str | None = None) -> str:
    """A URL of a reachable PostgreSQL, starting one if nothing answers."""
    if url:
        if reachable(url):
            return url
        raise RuntimeError(f"the PostgreSQL at {mask_url(url)} is not reachable")
    if reachable(LOCAL_URL) or _start_debian_cluster():
        return LOCAL_URL
    return TempCluster().url


def for_demo(url: str | None = None) -> str:
    """:func:`find_or_start` with ``url``, else ``$OUTBOX_DATABASE_URL``, else
    ``$DATABASE_URL``; a configured URL that does not answer is a
    :class:`~outbox.errors.ConfigurationError` (nothing is started in its place)."""
    url = url or os.environ.get("OUTBOX_DATABASE_URL") or os.environ.get("DATABASE_URL")
    try:
        return find_or_start(url)
    except RuntimeError as exc:
        raise ConfigurationError(str(exc)) from None


def with_dbname(url: str, dbname: str) -> str:
    """``url`` pointing at database ``dbname``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def dbname(url: str) -> str:
    """The database name in ``url``."""
    return urlsplit(url).path.lstrip("/")


def create_database(server: str, *, template: str | None = None, prefix: str = "outbox_t") -> str:
    """A new database named ``<prefix>_<random>`` on the server at ``server`` (a copy of
    database ``template`` if given, else empty); returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        sql.Identifier(name), sql.Identifier(template or "template0")
    )
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(query)
    return with_dbname(server, name)


def drop_database(server: str, url: str) -> None:
    """Drop the database of ``url`` (closing its connections); no error if it is gone."""
    with psycopg.connect(server, autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(dbname(url))))


def create_template(server: str, schema: str = "outbox",
                    setup: Callable[[psycopg.Connection[Any]], None] | None = None, *,
                    prefix: str = "outbox_tpl") -> str:
    """A database ``<prefix>_<random>`` to copy from, with outbox's migrations applied in
    ``schema`` (or, given ``setup``, whatever ``setup`` does on an autocommit connection to
    it); returns its name. A failing setup drops the half-made database and raises."""
    url = create_database(server, prefix=prefix)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            if setup is None:
                migrate(conn, schema)
            else:
                setup(conn)
    except BaseException:
        drop_database(server, url)
        raise
    return dbname(url)
