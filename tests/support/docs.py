"""The code snippets of the docs pages (docs/), for the tests that run them.

A snippet is the fenced block right after a ``<!-- name -->`` line; each name is on one page
once, so a test runs exactly the text a reader copies.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def snippet(page: str, name: str, lang: str = "python") -> str:
    """The ``lang`` block marked ``<!-- name -->`` on ``docs/<page>``."""
    text = (DOCS / page).read_text()
    found = re.findall(rf"<!-- {re.escape(name)} -->\n```{lang}\n(.*?)\n```", text, re.S)
    assert len(found) == 1, f"docs/{page} has one {lang} block marked <!-- {name} -->"
    return str(found[0])
