"""Table capture: a trigger that emits one event per changed row of a table, in the
writing transaction (``outbox capture``, ``manage.py outbox_capture``,
:func:`outbox.contrib.alembic.capture`).

Guarantees (the trigger and its checks are SQL functions of migrations/0011_sql_emit.sql,
so every route below runs the same code):

- Each INSERT, UPDATE or DELETE of a captured row (the operations chosen) emits one event
  through the SQL function ``emit`` inside the writing statement: it commits with the
  write, and a rolled-back transaction or savepoint emits nothing. Payload:
  ``{"op": "insert"|"update"|"delete", "table": "schema.name", "new": {...}|null,
  "old": {...}|null}`` with only the captured columns (all when none are given), as
  ``to_jsonb`` writes each value. An UPDATE that changes none of them emits nothing and
  costs no function call (the update trigger's WHEN compares their text forms first).
  With updates captured, a listed column cannot be dropped (the trigger depends on it):
  re-add or remove the capture first.
- ``key``/``tenant``: the named column's value as text (NEW's; OLD's on delete) becomes
  the event's ordering key/tenant (NULL: none). An event ``emit`` refuses (a key over 255
  characters, a payload over ``outbox.max_payload_bytes``) raises in the writer's
  statement, which fails: no write goes uncaptured.
- :func:`add` checks everything before installing anything: an unknown table or column,
  a bad type or operation raises :class:`~outbox.errors.OperationRefused` and changes
  nothing. Adding a captured table again replaces its capture (one trigger per table).
- TRUNCATE and COPY ... FREEZE bypass row triggers: not captured.

Privileges: installing needs what CREATE TRIGGER needs (the table's owner) and EXECUTE on
``capture_row`` (the migration role has it). Writers of the table need nothing more: the
trigger function runs as its owner.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from outbox._db import queries
from outbox._db.connection import render, translated
from outbox._emit.event import check_type
from outbox.admin.migrations import Cursor
from outbox.errors import InvalidEvent, OperationRefused

__all__ = ["OPERATIONS", "Capture", "add", "add_statement", "list_captures", "remove",
           "remove_statement"]

OPERATIONS = ("insert", "update", "delete")
# SQLSTATEs the capture functions raise for bad input: invalid parameter, undefined
# column, wrong object type.
_REFUSED = {"22023", "42703", "42809"}


@dataclass(frozen=True, slots=True)
class Capture:
    """One captured table: ``table`` as PostgreSQL names it (schema-qualified when it is
    not on the search_path)."""

    table: str
    type: str
    key: str | None
    tenant: str | None
    on: tuple[str, ...]
    columns: tuple[str, ...] | None


def add_statement(table: str, *, type: str, schema: str, key: str | None = None,
                  tenant: str | None = None, on: Sequence[str] = OPERATIONS,
                  columns: Sequence[str] | None = None) -> str:
    """The one SQL statement that installs the capture, values as literals: what :func:`add`
    runs, and what a migration tool runs as is (Alembic's ``op.execute``)."""
    _check(type, on, columns)
    return sql.SQL(queries.CAPTURE_ADD_CALL).format(
        schema=sql.SQL(render("{schema}", schema)), table=sql.Literal(table),
        type=sql.Literal(type), key=sql.Literal(key), tenant=sql.Literal(tenant),
        ops=sql.SQL("{}::text[]").format(sql.Literal(list(on))),
        columns=sql.SQL("{}::text[]").format(sql.Literal(None if columns is None
                                                        else list(columns))),
    ).as_string(None)


def remove_statement(table: str, *, schema: str) -> str:
    """The SQL statement that drops the capture of ``table`` (no error if it has none)."""
    return sql.SQL(queries.CAPTURE_REMOVE_CALL).format(
        schema=sql.SQL(render("{schema}", schema)), table=sql.Literal(table)).as_string(None)


def add(cursor: Cursor, table: str, *, type: str, schema: str, key: str | None = None,
        tenant: str | None = None, on: Sequence[str] = OPERATIONS,
        columns: Sequence[str] | None = None) -> Capture:
    """Install (or replace) the capture of ``table`` in the caller's transaction (a psycopg
    connection in autocommit commits it at once). ``cursor``: any DB-API cursor."""
    statement = add_statement(table, type=type, schema=schema, key=key, tenant=tenant, on=on,
                              columns=columns)
    resolved = _table(cursor, table)
    with _refusals():
        cursor.execute(statement)
    return Capture(resolved, type, key, tenant, tuple(sorted(set(on))),
                   None if columns is None else tuple(columns))


def remove(cursor: Cursor, table: str, *, schema: str) -> None:
    """Drop the capture of ``table``; :class:`OperationRefused` if it has none."""
    resolved = _table(cursor, table)
    with _refusals():
        cursor.execute(render(queries.CAPTURE_REMOVE, schema), (table,))
        removed = cursor.fetchall()[0][0]
    if not removed:
        raise OperationRefused(f"table {resolved} is not captured")


def list_captures(cursor: Cursor, *, schema: str) -> list[Capture]:
    """Every captured table, by name."""
    with _refusals():
        cursor.execute(render(queries.CAPTURE_LIST, schema))
        rows = cursor.fetchall()
    return [_capture(str(table), json.loads(config)) for table, config in rows]


def _capture(table: str, config: dict[str, Any]) -> Capture:
    columns = config.get("columns")
    return Capture(table, config["type"], config.get("key"), config.get("tenant"),
                   tuple(config.get("on") or OPERATIONS),
                   None if columns is None else tuple(columns))


def _check(type: str, on: Sequence[str], columns: Sequence[str] | None) -> None:
    try:
        check_type(type)
    except InvalidEvent as exc:
        raise OperationRefused(str(exc)) from None
    bad = [o for o in on if o not in OPERATIONS]
    if bad or not on:
        raise OperationRefused(f"capture operations must be among {', '.join(OPERATIONS)},"
                               f" not {','.join(bad) or 'none'}")
    if columns is not None and not columns:
        raise OperationRefused("capture columns: give at least one, or none for all")


def _table(cursor: Cursor, table: str) -> str:
    with _refusals():
        cursor.execute(queries.CAPTURE_TABLE, (table,))
        found = cursor.fetchall()[0][0]
    if found is None:
        raise OperationRefused(f"table {table!r} does not exist (or is not on the search_path)")
    return str(found)


@contextmanager
def _refusals() -> Iterator[None]:
    """psycopg errors out as outbox errors; the capture functions' refusals (bad input)
    as :class:`OperationRefused` with PostgreSQL's message."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate in _REFUSED:
            raise OperationRefused(exc.diag.message_primary or str(exc)) from exc
        with translated():
            raise
