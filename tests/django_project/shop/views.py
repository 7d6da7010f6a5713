"""The shop's views: the Django snippet of docs/guides/stacks.md, executed as written
(so the documented code is what tests/acceptance/test_emit_stacks.py drives through Django's
test client)."""

import re
from collections.abc import Callable
from pathlib import Path

from django.http import HttpRequest, HttpResponse

place_order: Callable[[HttpRequest], HttpResponse]  # defined by the snippet

_PAGE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "stacks.md"
_SNIPPET = re.search(r"<!-- emit-django -->\n```python\n(.*?)\n```", _PAGE.read_text(), re.S)
assert _SNIPPET, "docs/guides/stacks.md has the Django emit snippet"
exec(_SNIPPET.group(1))
