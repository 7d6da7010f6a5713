"""The worker, for the interfaces: the only module outside the worker package
(:mod:`outbox.delivery`, internal) that imports it. The CLI (``outbox worker``, ``outbox
demo``, ``outbox endpoints ping``), the HTTP API (ping) and :mod:`outbox.testing` call these.

Importing this module imports nothing of the worker: each function imports what it needs
when called, so an app that only emits, and the commands that do not deliver, run without
the ``worker`` extra.

- A missing worker dependency is a :class:`~outbox.errors.ConfigurationError` naming the
  package and ``pip install 'outbox[worker]'``.
- Invalid worker settings are a :class:`~outbox.errors.ConfigurationError`
  ``invalid worker setting NAME: why``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from outbox.admin.endpoints import DeliveryCredentials, Endpoint
from outbox.errors import ConfigurationError
from outbox.settings import invalid_settings

if TYPE_CHECKING:
    from outbox.delivery.ping import PingResult
    from outbox.delivery.settings import WorkerSettings


__all__ = ["demo_runner", "drain", "ping", "run_worker", "worker_settings"]


def _require(what: str, module: str) -> None:
    """Import ``module`` of the worker package, or say which extra ``what`` needs."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{what} needs the 'worker' extra (missing {exc.name}): pip install 'outbox[worker]'"
        ) from None


def _require_extra(what: str, extra: str = "worker") -> None:
    """The packages of ``extra`` are installed (checked from this package's metadata,
    without importing them; nothing is checked where that metadata is absent)."""
    try:
        requirements = importlib.metadata.requires("outbox") or []
    except importlib.metadata.PackageNotFoundError:
        return
    marker = f'extra == "{extra}"'
    for requirement in requirements:
        name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
        if marker in requirement and name != "outbox":
            try:
                importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                raise ConfigurationError(
                    f"{what} needs the '{extra}' extra (missing {name}):"
                    f" pip install 'outbox[{extra}]'") from None


def worker_settings(overrides: Mapping[str, Any], what: str = "the worker") -> WorkerSettings:
    """Worker settings from the environment, with ``overrides`` (option values) on top."""
    _require(what, "outbox.delivery.settings")
    from outbox.delivery.settings import WorkerSettings

    try:
        return WorkerSettings(**overrides)
    except ValidationError as exc:
        raise invalid_settings(exc, "worker setting") from None


def run_worker(overrides: Mapping[str, Any], *, drain: bool, log_format: str | None,
               log_level: str, processes: int | None = 1) -> dict[str, int]:
    """Run the worker until SIGTERM/SIGINT (or drained); its counters.

    ``processes``: 1 runs it in this process; more (None: one per available CPU, see
    :func:`outbox.delivery.cpus.available_cpus`) runs that many worker processes
    under a supervisor (:mod:`outbox.delivery.supervisor`), whose counters are their sums.
    """
    # not imported here: the supervisor of --processes N does not need it (its children
    # start sooner), and a single worker imports it below
    _require_extra("the worker")
    _require("the worker", "outbox.delivery.supervisor")
    from outbox.delivery import cpus, logs, supervised, supervisor

    settings = worker_settings(overrides)
    fmt = log_format or settings.log_format
    logs.configure(fmt, log_level)
    n = processes or cpus.available_cpus()
    if n > 1:  # the supervisor does not import the worker: its children start sooner
        return supervisor.run(settings, n, overrides=overrides, drain=drain, log_format=fmt,
                              log_level=log_level)
    supervised.watch_parent()  # only when a supervisor started this process
    _require("the worker", "outbox.delivery.runner")
    from outbox.delivery import runner

    stats = asyncio.run(runner.run_worker(settings, drain=drain,
                                          signals=(signal.SIGTERM, signal.SIGINT),
                                          tune_gc=True))
    supervised.report_stats(stats)
    return stats


def drain(overrides: Mapping[str, Any], what: str = "drain") -> dict[str, int]:
    """Run one worker in this process until nothing is due; its counters. No signal
    handlers and no logging set up: the caller's (a test's) process keeps its own. Each
    outcome commits as ``outbox worker`` commits it."""
    _require(what, "outbox.delivery.runner")
    from outbox.delivery import runner
    from outbox.delivery.settings import WorkerSettings

    unknown = sorted(set(overrides) - set(WorkerSettings.model_fields))
    if unknown:
        raise ConfigurationError(f"{what}: unknown worker setting(s) {', '.join(unknown)}")
    settings = worker_settings(overrides, what)
    return asyncio.run(runner.run_worker(settings, drain=True))


def demo_runner() -> Callable[[str, str, int], None]:
    """The demo (:func:`outbox.delivery.demo.run_demo`: database URL, schema, event count),
    checked importable before anything is set up for it."""
    _require("the demo", "outbox.delivery.demo")
    from outbox.delivery.demo import run_demo

    return run_demo


def ping(overrides: Mapping[str, Any], endpoint: Endpoint,
         secrets: Sequence[str], credentials: str | None = None,
         auth: DeliveryCredentials | None = None,
         oauth2_secret: str | None = None) -> PingResult:
    """One ping through the worker's sender (:func:`outbox.delivery.ping.ping`), with the
    worker's settings from the environment and ``overrides`` on top (the API passes its
    own database, schema and ``allow_networks``); ``credentials``: a broker URL's;
    ``auth``: the endpoint's opened credentials (``endpoints.delivery_credentials``);
    ``oauth2_secret``: the endpoint's OAuth2 client secret, if it has OAuth2. Never
    raises for a network or HTTP failure: the result says what happened."""
    _require("ping", "outbox.delivery.ping")
    from outbox.delivery.ping import ping as send_ping

    settings = worker_settings(overrides, "ping")
    return asyncio.run(send_ping(settings, endpoint, secrets, credentials=credentials,
                                 auth=auth, oauth2_secret=oauth2_secret))
