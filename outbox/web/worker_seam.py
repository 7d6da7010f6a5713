"""The web interface's only door into the worker package (:mod:`outbox.delivery`).

Importing this module imports nothing of the worker: :func:`ping` imports it when called,
so the API runs without the ``worker`` extra (ping then answers ``not_configured``).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from outbox.endpoints import Endpoint
from outbox.errors import ConfigurationError
from outbox.settings import Settings

if TYPE_CHECKING:
    from outbox.delivery.ping import PingResult


def ping(settings: Settings, endpoint: Endpoint, secrets: Sequence[str],
         credentials: str | None = None) -> PingResult:
    """One ping through the worker's sender (:func:`outbox.delivery.ping.ping`): the
    worker's settings from the environment, with this app's database, schema and
    ``allow_networks`` on top. Never raises for a network or HTTP failure."""
    try:
        importlib.import_module("outbox.delivery.ping")
    except ImportError as exc:
        raise ConfigurationError(
            f"ping needs the 'worker' extra (missing {exc.name}): pip install 'outbox[worker]'"
        ) from None
    from outbox.delivery.ping import ping as send_ping
    from outbox.delivery.settings import WorkerSettings

    try:
        worker = WorkerSettings(database_url=settings.database_url,
                                schema_name=settings.schema_name,
                                allow_networks=settings.allow_networks)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigurationError(f"invalid worker setting {first['loc']}: {first['msg']}") from None
    return asyncio.run(send_ping(worker, endpoint, secrets, credentials=credentials))
