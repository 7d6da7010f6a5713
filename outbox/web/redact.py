"""Keep portal-link tokens out of logs.

A portal link is ``/portal/enter?token=...``: whoever reads the token before it expires
can open that tenant's portal. An access log records the query string, so
:class:`RedactTokens` rewrites every ``token=`` value of a log record (its message and its
arguments: uvicorn's access log passes the path as an argument) to ``token=[redacted]``,
whatever the spelling the server would decode to ``token`` (``TOKEN=``, ``%74oken=``,
``tok%65n%3D``...). ``outbox serve`` installs it on ``uvicorn.access``
(:func:`uvicorn_log_config`); an application that mounts the app, or a proxy in front of
it, must redact its own logs (docs/guides/console.md says how).
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any


def _spellings(word: str) -> str:
    """A pattern matching ``word`` with any of its letters percent-encoded (``%74oken``):
    the server decodes them, so each spelling is the same parameter."""
    return "".join(f"(?:{c}|%{ord(c.lower()):02x}|%{ord(c.upper()):02x})" for c in word)


# the name in any spelling, then "=" (or %3D), then the value up to the next separator
_TOKEN = re.compile(r"((?:^|[?&;])" + _spellings("token") + r"(?:=|%3d))[^&;\s\"]*",
                    re.IGNORECASE)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with the value of every ``token=`` query parameter replaced."""
    return _TOKEN.sub(r"\1" + REDACTED, text)


def _clean(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactTokens(logging.Filter):
    """A logging filter that redacts ``token=`` values; it never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _clean(v) for k, v in record.args.items()}
        return True


def uvicorn_log_config(base: dict[str, Any]) -> dict[str, Any]:
    """uvicorn's logging config ``base`` (``uvicorn.config.LOGGING_CONFIG``) with
    :class:`RedactTokens` on its access and error loggers."""
    config = copy.deepcopy(base)
    config.setdefault("filters", {})["redact_tokens"] = {"()": f"{__name__}.RedactTokens"}
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = config.setdefault("loggers", {}).setdefault(name, {})
        logger["filters"] = [*logger.get("filters", []), "redact_tokens"]
    return config
