"""mkdocs hooks (docs/mkdocs/mkdocs.yml ``hooks``).

Docstrings cross-reference with Sphinx roles (``:func:`outbox.verify```), which mkdocstrings
renders as the role's name followed by the code; the role names are dropped from the HTML
so that the reference reads ``outbox.verify``.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|exc|obj|const):(?=<code>)")


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub("", html)
