"""Settings of the test project. The database comes from the environment:
``TEST_DJANGO_DB_URL`` (a postgresql:// URL) or ``TEST_DJANGO_SQLITE`` (a file path);
``TEST_DJANGO_OUTBOX`` (JSON) becomes the ``OUTBOX`` dict, ``TEST_DJANGO_OUTBOX_SCHEMA`` the
``OUTBOX_SCHEMA`` setting."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlsplit

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "outbox.contrib.django",
    "tests.django_app_migrate.shop",
]

if os.environ.get("TEST_DJANGO_SQLITE"):
    DATABASES: dict[str, dict[str, Any]] = {"default": {"ENGINE": "django.db.backends.sqlite3",
                             "NAME": os.environ["TEST_DJANGO_SQLITE"]}}
else:
    _url = urlsplit(os.environ["TEST_DJANGO_DB_URL"])
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": _url.path.lstrip("/"),
        "HOST": _url.hostname, "PORT": _url.port or 5432, "USER": _url.username or "",
        "PASSWORD": _url.password or ""}}

if os.environ.get("TEST_DJANGO_OUTBOX"):
    OUTBOX = json.loads(os.environ["TEST_DJANGO_OUTBOX"])
if os.environ.get("TEST_DJANGO_OUTBOX_SCHEMA"):
    OUTBOX_SCHEMA = os.environ["TEST_DJANGO_OUTBOX_SCHEMA"]
