"""The web interface: the JSON API, the operator console and the customer portal.

``create_app(settings)`` builds the ASGI app (FastAPI) that ``outbox serve`` runs and an
application can mount. Needs the ``web`` extra: ``pip install 'outbox[web]'``.
"""

from __future__ import annotations

from outbox.web.app import create_app

__all__ = ["create_app"]
