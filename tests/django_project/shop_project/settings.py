"""A small Django project emitting through outbox (tests/integration/test_emit_stacks_django.py).

The database is ``OUTBOX_TEST_DJANGO_URL`` (a migrated test database); the backend is Django's
postgresql backend on psycopg 3, or on psycopg2 when ``OUTBOX_TEST_DJANGO_DRIVER=psycopg2``
(``pg2_backend``: Django prefers psycopg 3 whenever it is importable, and outbox needs it),
or on psycopg 3 with ``OPTIONS={"server_side_binding": True}`` when it is ``psycopg-server``.
"""

import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ["OUTBOX_TEST_DJANGO_URL"])
_driver = os.environ.get("OUTBOX_TEST_DJANGO_DRIVER", "psycopg")

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = ["shop"]
MIDDLEWARE = ["django.middleware.csrf.CsrfViewMiddleware"]  # as in a new project
ROOT_URLCONF = "shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# outbox reads its settings from here first (outbox.contrib.django.settings), then the
# environment: the emit scenarios check this one is obeyed.
OUTBOX_MAX_PAYLOAD_BYTES = 4096
DATABASES = {
    "default": {
        "ENGINE": "pg2_backend" if _driver == "psycopg2" else "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "HOST": _url.hostname,
        "PORT": _url.port or 5432,
        "USER": _url.username or "",
        "PASSWORD": _url.password or "",
        "OPTIONS": {"server_side_binding": True} if _driver == "psycopg-server" else {},
    },
    # not PostgreSQL: emit(using="lite") is a TypeError
    "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}
