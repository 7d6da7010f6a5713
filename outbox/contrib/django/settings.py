"""outbox settings for a Django project: Django settings first, then the environment.

Each outbox setting (the ``OUTBOX_*`` variables of docs/reference/settings.md) may be
given, highest precedence first:

1. in an ``OUTBOX`` dict in the Django settings, without the prefix:
   ``OUTBOX = {"SCHEMA": "webhooks", "JSON_DEFAULT": "shop.encoding:json_default"}``;
2. as a Django setting of the variable's own name: ``OUTBOX_SCHEMA = "webhooks"``;
3. in the environment (``OUTBOX_SCHEMA=webhooks``), as for the CLI and the worker;
4. the default.

So a project that configures outbox in ``settings.py`` and a worker that reads the same
values from its environment agree as long as both are given the same values. An unknown
key in ``OUTBOX`` or an invalid value raises :class:`~outbox.errors.ConfigurationError`
naming it. The database is Django's own connection: ``DATABASE_URL`` is read only by the
CLI and the worker.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from pydantic import ValidationError

from outbox.errors import ConfigurationError
from outbox.settings import Settings

__all__ = ["outbox_settings"]

# Django name (without OUTBOX_) -> the keyword Settings accepts for it.
_ALIASES = {"SCHEMA": "schema_name", "DATABASE_URL": "OUTBOX_DATABASE_URL"}


def _keyword(name: str) -> str:
    return _ALIASES.get(name, name.lower())


def _known() -> set[str]:
    names = {name.upper() for name in Settings.model_fields} - {"SCHEMA_NAME"}
    return names | set(_ALIASES)


def outbox_settings() -> Settings:
    """:class:`~outbox.settings.Settings` from the Django settings and the environment."""
    known = _known()
    given: dict[str, Any] = {}
    for name in sorted(known):
        if hasattr(django_settings, f"OUTBOX_{name}"):
            given[name] = getattr(django_settings, f"OUTBOX_{name}")
    nested = getattr(django_settings, "OUTBOX", {})
    if not isinstance(nested, dict):
        raise ConfigurationError("settings.OUTBOX must be a dict, e.g. {'SCHEMA': 'outbox'}")
    unknown = sorted(set(nested) - known)
    if unknown:
        raise ConfigurationError(
            f"settings.OUTBOX has unknown keys {unknown}; known: {sorted(known)}")
    given.update(nested)
    try:
        return Settings(**{_keyword(name): value for name, value in given.items()})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                             for e in exc.errors())
        raise ConfigurationError(f"invalid outbox setting in Django settings: {problems}"
                                 ) from exc
