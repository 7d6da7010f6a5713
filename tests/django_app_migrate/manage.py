"""``manage.py`` of the test project.

``TEST_DJANGO_DRIVER=psycopg2`` runs Django's postgresql backend on psycopg2: Django picks
psycopg 3 whenever it can import it, and outbox always installs psycopg 3, so the backend
is imported while ``psycopg`` is hidden, as on a project whose Django uses psycopg2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _django_on_psycopg2() -> None:
    saved = {k: v for k, v in sys.modules.items() if k == "psycopg" or k.startswith("psycopg.")}
    for name in saved:
        del sys.modules[name]
    sys.modules["psycopg"] = None  # type: ignore[assignment]  # ImportError on import
    try:
        import django.db.backends.postgresql.base
        import django.db.backends.postgresql.creation
        import django.db.backends.postgresql.features
        import django.db.backends.postgresql.introspection
        import django.db.backends.postgresql.operations
        import django.db.backends.postgresql.schema  # noqa: F401
    finally:
        del sys.modules["psycopg"]
        sys.modules.update(saved)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django_app_migrate.settings")
    if os.environ.get("TEST_DJANGO_DRIVER") == "psycopg2":
        _django_on_psycopg2()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
