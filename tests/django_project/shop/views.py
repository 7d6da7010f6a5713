"""The shop's views: README.md's Django snippet, executed as written (so the README's code is
what tests/acceptance/test_emit_stacks.py drives through Django's test client)."""

import re
from collections.abc import Callable
from pathlib import Path

from django.http import HttpRequest, HttpResponse

place_order: Callable[[HttpRequest], HttpResponse]  # defined by the snippet

_README = (Path(__file__).resolve().parents[3] / "README.md").read_text()
_SNIPPET = re.search(r"<!-- emit-django -->\n```python\n(.*?)\n```", _README, re.S)
assert _SNIPPET, "README.md has the Django emit snippet"
exec(_SNIPPET.group(1))
