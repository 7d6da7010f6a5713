"""Settings read from the environment (pydantic-settings), each with a default.

``OUTBOX_DATABASE_URL`` falls back to ``DATABASE_URL``, then to the local server.
Worker-only settings live in :mod:`outbox.delivery.settings`, which extends this class.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from outbox._security.secretbox import SecretBox
from outbox.errors import ConfigurationError

__all__ = [
    "DEFAULT_DATABASE_URL",
    "Settings",
    "get_settings",
    "invalid_settings",
    "mask_url",
]

DEFAULT_DATABASE_URL = "postgresql://127.0.0.1:5432/postgres"
SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
IMPORT_PATH_RE = re.compile(rf"^{_DOTTED}(?::{_DOTTED})?$")


class Settings(BaseSettings):
    """What both the emitting app and the CLI need."""

    model_config = SettingsConfigDict(
        env_prefix="OUTBOX_", extra="ignore", env_parse_none_str="none"
    )

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        validation_alias=AliasChoices("OUTBOX_DATABASE_URL", "DATABASE_URL"),
    )
    schema_name: str = Field(
        default="outbox", validation_alias=AliasChoices("OUTBOX_SCHEMA", "schema_name")
    )
    max_payload_bytes: int = Field(default=1024 * 1024, gt=0)
    # psycopg prepares a statement after it ran this many times; None disables
    # preparation (needed behind PgBouncer in transaction mode).
    prepare_threshold: int | None = Field(default=5, ge=0)
    # CIDRs the SSRF guard lets through (OUTBOX_ALLOW_NETWORKS): the CLI checks endpoint
    # URLs against it at registration, the worker before every connection.
    allow_networks: str = ""
    # Fernet keys (comma-separated, first encrypts) for signing secrets at rest.
    secret_key: SecretStr = SecretStr("")
    # How workers learn of new work (OUTBOX_WAKEUP): "notify" -- an emitting transaction
    # NOTIFYs when a worker is idle (outbox/delivery/wakeup.py); "poll" -- never, workers
    # poll. Read by emit and by the worker.
    wakeup: Literal["notify", "poll"] = "notify"
    # The application's payload encoder (OUTBOX_JSON_DEFAULT), "pkg.module:function": called
    # like json.dumps' default for types outbox.Event does not encode itself. Imported on
    # first use (json_default_hook), not here: the module may import outbox.
    json_default: str = ""
    # The event catalog (outbox.types): OUTBOX_VALIDATE -- "strict" refuses a payload that
    # does not match its registered type's JSON Schema (InvalidEvent, nothing written),
    # "warn" logs it and emits, "off" never checks (nor reads the catalog).
    validate_payloads: Literal["strict", "warn", "off"] = Field(
        default="strict", validation_alias=AliasChoices("OUTBOX_VALIDATE", "validate_payloads"))
    # OUTBOX_REQUIRE_REGISTERED_TYPES=true: emitting a type absent from the catalog is refused.
    require_registered_types: bool = False
    # How old a process's copy of the catalog may get before emit re-reads its version row
    # (one tiny SELECT per process and database at most this often; 0: before every emit).
    catalog_refresh_seconds: float = Field(default=5.0, ge=0)

    @field_validator("allow_networks")
    @classmethod
    def _check_allow_networks(cls, value: str) -> str:
        from outbox._security.ssrf import parse_networks

        parse_networks(value)  # ValueError names the bad item
        return value

    @field_validator("json_default")
    @classmethod
    def _check_json_default(cls, value: str) -> str:
        if value and not IMPORT_PATH_RE.match(value):
            raise ValueError("OUTBOX_JSON_DEFAULT must be an import path such as "
                             "'myapp.encoding:json_default'")
        return value

    @property
    def json_default_hook(self) -> Callable[[Any], Any] | None:
        """The ``OUTBOX_JSON_DEFAULT`` callable (imported once per process), or None.

        :class:`~outbox.errors.ConfigurationError` if it cannot be imported or is not callable.
        """
        return load_callable(self.json_default) if self.json_default else None

    @field_validator("schema_name")
    @classmethod
    def _check_schema(cls, value: str) -> str:
        if not SCHEMA_RE.match(value):
            raise ValueError("OUTBOX_SCHEMA must be a lowercase SQL identifier, e.g. 'outbox'")
        return value


    def secret_box(self) -> SecretBox:
        """Seals and opens stored endpoint secrets with ``OUTBOX_SECRET_KEY``."""
        return SecretBox(self.secret_key.get_secret_value())


@lru_cache(maxsize=16)
def load_callable(path: str) -> Callable[[Any], Any]:
    """The callable at ``"pkg.module:attr"`` (or ``"pkg.module.attr"``), imported once."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not IMPORT_PATH_RE.match(path):
        raise ConfigurationError(
            f"OUTBOX_JSON_DEFAULT={path!r} is not an import path such as "
            "'myapp.encoding:json_default'")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except Exception as exc:  # ImportError, AttributeError, or the module failing to import
        raise ConfigurationError(
            f"OUTBOX_JSON_DEFAULT={path!r} cannot be imported: {exc!r}") from exc
    if not callable(target):
        raise ConfigurationError(f"OUTBOX_JSON_DEFAULT={path!r} is not callable")
    return target  # type: ignore[no-any-return]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings from the environment, read once per process."""
    return Settings()


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***``, for error messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable database URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))


def invalid_settings(exc: ValidationError, what: str) -> ConfigurationError:
    """The first problem of ``exc`` as ``invalid WHAT NAME: why``."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "settings"
    return ConfigurationError(f"invalid {what} {where}: {first['msg']}")
