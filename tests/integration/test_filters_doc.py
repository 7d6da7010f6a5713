"""docs/guides/filters.md says what is true: every example row matches as the page says,
by the database's evaluator (test-filter, as routing) and by the pure-Python reference;
every filter on the page compiles; the compiled form and the test-filter output shown are
the real ones."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import psycopg

from outbox.admin import endpoints as ep
from outbox.admin import filters
from tests.support import filter_eval
from tests.support.cli import invoke
from tests.support.pg import SCHEMA

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "filters.md").read_text()
ROW = re.compile(r"^\| `(\{.*\})` \| `(.*)` \| (yes|no) \|$", re.M)


def test_every_example_row_holds(db_url: str) -> None:
    rows = ROW.findall(PAGE)
    assert len(rows) >= 15
    with psycopg.connect(db_url, autocommit=True) as c:
        for spec_text, payload_text, said in rows:
            spec = json.loads(spec_text)
            e = ep.add(c, "https://example.com/h", schema=SCHEMA, filter=spec_text).endpoint
            got = filters.try_filter(c, e.id, json.loads(payload_text), schema=SCHEMA)
            assert got.matches == (said == "yes"), (spec_text, payload_text)
            doc = json.loads(payload_text, parse_float=Decimal)
            assert filter_eval.matches(spec, doc) == (said == "yes"), (spec_text, payload_text)


def test_every_filter_on_the_page_compiles() -> None:
    shown = re.findall(r"--filter '(\{.*?\})'", PAGE)
    shown += [spec for spec, _, _ in ROW.findall(PAGE)]
    shown += re.findall(r"^\| `(\"[^`]*\})` ", PAGE, re.M)  # the grammar table's entries
    shown.append('{"amount": {"$gte": 100, "$lt": 1000}}')
    assert shown[-1] in PAGE
    assert len(shown) > 20
    for text in shown:
        filters.compile_filter(text if text.startswith("{") else "{" + text.replace(
            "v, ...", "1, 2").replace("filter, ...", '{"a": 1}').replace(": v}", ": 1}") + "}")
    assert re.search(r'becomes\s+`exists\(\$\."amount" \? \(@ >= 1000\)\)`', PAGE)
    assert filters.compile_filter({"amount": {"$gte": 1000}}).path == (
        'exists($."amount" ? (@ >= 1000))')


def test_the_test_filter_output_shown_is_real(db_url: str) -> None:
    block = PAGE.split("```console\n", 1)[1].split("```", 1)[0]
    command, *expected = block.splitlines()
    spec = json.loads(expected[1].split("filter:  ", 1)[1])
    with psycopg.connect(db_url, autocommit=True) as c:
        e = ep.add(c, "https://example.com/h", schema=SCHEMA, filter=spec).endpoint
    payload = command.split("--payload '", 1)[1].rstrip("'")
    done = invoke(db_url, "endpoints", "test-filter", str(e.id), "--payload", payload)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == expected
