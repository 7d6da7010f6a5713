"""Fixtures for the tests of the worker's HTTP transport (``tests.support.guarded_http``)."""

from __future__ import annotations

import pytest

from outbox._security import ssrf
from tests.support.guarded_http import Stub


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Stub:
    """A scripted resolver in place of ``ssrf.system_resolver`` for this test."""
    stub = Stub()
    monkeypatch.setattr(ssrf, "system_resolver", stub)
    return stub
