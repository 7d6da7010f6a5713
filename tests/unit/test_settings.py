"""Settings precedence and URL masking."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from outbox.settings import DEFAULT_DATABASE_URL, Settings, mask_url


def test_database_url_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUTBOX_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert Settings().database_url == DEFAULT_DATABASE_URL
    monkeypatch.setenv("DATABASE_URL", "postgresql://b/db")
    assert Settings().database_url == "postgresql://b/db"
    monkeypatch.setenv("OUTBOX_DATABASE_URL", "postgresql://a/db")
    assert Settings().database_url == "postgresql://a/db"


def test_schema_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_SCHEMA", "webhooks")
    assert Settings().schema_name == "webhooks"
    monkeypatch.setenv("OUTBOX_SCHEMA", 'bad"; drop')
    with pytest.raises(ValidationError, match="lowercase SQL identifier"):
        Settings()


def test_payload_limit_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_MAX_PAYLOAD_BYTES", "0")
    with pytest.raises(ValidationError):
        Settings()


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql://u:secret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://h/db", "postgresql://h/db"),
        ("postgresql://:pw@h/db", "postgresql://:***@h/db"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert "secret" not in mask_url(url)


def test_import_outbox_does_not_import_worker_dependencies() -> None:
    code = (
        "import sys, outbox, outbox.cli, outbox.admin.endpoints, outbox.admin.migrations,"
        " outbox.inbox;"
        "from outbox.cli import load_commands; load_commands();"
        "bad = {'httpx', 'tenacity', 'psycopg_pool', 'outbox.delivery', 'outbox.contrib',"
        " 'fastapi', 'starlette', 'django', 'flask'} & set(sys.modules);"
        "print(sorted(bad)); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prepare_threshold_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_PREPARE_THRESHOLD", "none")
    assert Settings().prepare_threshold is None
    monkeypatch.setenv("OUTBOX_PREPARE_THRESHOLD", "0")
    assert Settings().prepare_threshold == 0
