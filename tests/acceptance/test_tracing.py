"""Trace context: an event emitted inside a span carries its traceparent to the receiver."""

from __future__ import annotations

import subprocess
import sys

import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import outbox
from outbox.testing.receiver import Receiver
from tests.support.workers import add_endpoint, drain, rows, settings

_provider = TracerProvider()


def test_traceparent_round_trip(db_url: str) -> None:
    tracer = _provider.get_tracer("test")
    with Receiver() as rx:
        add_endpoint(db_url, rx.url + "/t")
        with psycopg.connect(db_url) as c:
            with tracer.start_as_current_span("checkout") as span:
                outbox.emit(c, outbox.Event("order.paid", {"n": 1}))
                outbox.emit_many(c, [outbox.Event("order.paid", {"n": i}) for i in (2, 3)])
                ctx = span.get_span_context()
            outbox.emit(c, outbox.Event("order.paid", {"n": 4}))  # outside any span
            c.commit()
        drain(settings(db_url))
        assert rx.wait_for(4, 5)
    expected = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    got = sorted((r.body, r.headers.get("traceparent")) for r in rx.received)
    assert got == [(b'{"n":1}', expected), (b'{"n":2}', expected), (b'{"n":3}', expected),
                   (b'{"n":4}', None)]
    assert rows(db_url, "SELECT count(*) FROM outbox.events WHERE traceparent IS NULL") == [(1,)]
    assert trace.get_current_span().get_span_context().is_valid is False


def test_no_opentelemetry_is_a_no_op() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from outbox._emit.tracing import current_traceparent\n"
        "assert current_traceparent() is None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
