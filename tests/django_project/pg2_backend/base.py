"""Django's postgresql backend on psycopg2, in a process where psycopg 3 is installed.

Django picks psycopg 3 whenever ``import psycopg`` succeeds; a psycopg2 application does
not have it, but outbox's core depends on it. While Django's backend modules load, psycopg
3 is hidden, so they bind to psycopg2 (``is_psycopg3`` is False), as in such an app.
"""

import sys

_hidden = {name: sys.modules.pop(name) for name in list(sys.modules)
           if name == "psycopg" or name.startswith("psycopg.")}
sys.modules["psycopg"] = None  # type: ignore[assignment]
try:
    from django.db.backends.postgresql import base as _base
    from django.db.backends.postgresql import psycopg_any as _any
finally:
    del sys.modules["psycopg"]
    sys.modules.update(_hidden)

assert not _any.is_psycopg3, "Django's backend must run on psycopg2 here"
DatabaseWrapper = _base.DatabaseWrapper
