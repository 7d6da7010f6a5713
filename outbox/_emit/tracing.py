"""W3C trace context for emitted events (optional OpenTelemetry integration).

If ``opentelemetry-api`` is installed and :func:`outbox.emit` runs inside a recording or
sampled span, the event stores that span's ``traceparent`` and every delivery POST sends
it, so a trace links the business write to the webhook call. Without the package, or
outside a span, nothing is stored and nothing is sent: a no-op.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache


@cache
def _span_context_getter() -> Callable[[], str | None]:
    try:
        from opentelemetry import trace
    except ImportError:
        return lambda: None

    def current() -> str | None:
        ctx = trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    return current


def current_traceparent() -> str | None:
    """The current span's ``traceparent`` header value, or None."""
    return _span_context_getter()()
