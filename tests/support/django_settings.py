"""Minimal Django settings for tests/integration/test_inbox_django.py, which adds DATABASES
(a per-module receiver database) and configures Django with them."""

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "tests.integration.test_inbox_django"
