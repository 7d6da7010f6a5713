"""The command line's only door into the worker package (:mod:`outbox.delivery`).

Importing this module imports nothing of the worker: each function imports what it needs
when called, so the commands that do not deliver run without the ``worker`` extra.

- A missing worker dependency is a :class:`~outbox.errors.ConfigurationError` naming the
  package and ``pip install 'outbox[worker]'``.
- Invalid worker settings are a :class:`~outbox.errors.ConfigurationError`
  ``invalid worker setting NAME: why``.
"""

from __future__ import annotations

import asyncio
import importlib
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from outbox.cli import invalid_settings
from outbox.endpoints import Endpoint
from outbox.errors import ConfigurationError

if TYPE_CHECKING:
    from outbox.delivery.ping import PingResult
    from outbox.delivery.settings import WorkerSettings


def _require(what: str, module: str) -> None:
    """Import ``module`` of the worker package, or say which extra ``what`` needs."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{what} needs the 'worker' extra (missing {exc.name}): pip install 'outbox[worker]'"
        ) from None


def worker_settings(overrides: Mapping[str, Any], what: str = "the worker") -> WorkerSettings:
    """Worker settings from the environment, with ``overrides`` (option values) on top."""
    _require(what, "outbox.delivery.settings")
    from outbox.delivery.settings import WorkerSettings

    try:
        return WorkerSettings(**overrides)
    except ValidationError as exc:
        raise invalid_settings(exc, "worker setting") from None


def run_worker(overrides: Mapping[str, Any], *, drain: bool, log_format: str | None,
               log_level: str) -> dict[str, int]:
    """Run one worker in this process until SIGTERM/SIGINT (or drained); its counters."""
    _require("the worker", "outbox.delivery.runner")
    from outbox.delivery import logs, runner

    settings = worker_settings(overrides)
    logs.configure(log_format or settings.log_format, log_level)
    return asyncio.run(runner.run_worker(settings, drain=drain,
                                         signals=(signal.SIGTERM, signal.SIGINT)))


def demo_runner() -> Callable[[str, str, int], None]:
    """The demo (:func:`outbox.delivery.demo.run_demo`: database URL, schema, event count),
    checked importable before anything is set up for it."""
    _require("the demo", "outbox.delivery.demo")
    from outbox.delivery.demo import run_demo

    return run_demo


def ping(overrides: Mapping[str, Any], endpoint: Endpoint,
         secrets: Sequence[str]) -> PingResult:
    """One ping through the worker's sender (:func:`outbox.delivery.ping.ping`)."""
    _require("ping", "outbox.delivery.ping")
    from outbox.delivery.ping import ping as send_ping

    settings = worker_settings(overrides, "ping")
    return asyncio.run(send_ping(settings, endpoint, secrets))
