"""docs/guides/security.md: its Python snippet runs and prints what the page says, and its
limits table is EndpointOptions' and its OAuth2 table OAuth2Options' (the page cannot drift
from the models)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from outbox.admin.endpoint_oauth2 import fields
from outbox.admin.endpoint_options import RESERVED_HEADERS, CredentialChanges, limits
from outbox.cli.params import number

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "security.md"


def test_the_python_snippet_prints_what_the_page_says() -> None:
    text = PAGE.read_text()
    snippet = re.search(r"```python\n(.*?)\n```", text, re.S)
    assert snippet
    done = subprocess.run([sys.executable, "-c", snippet.group(1)], capture_output=True,
                          text=True, timeout=60, check=True)
    said = re.search(r"prints `(.*?)`\.", text, re.S)
    assert said and done.stdout.strip() == " ".join(said.group(1).split())


def test_the_limits_table_is_the_models() -> None:
    text = PAGE.read_text()
    for limit in limits():
        row = (f"| `{limit['name']}` | {limit['type']} | {number(limit['min'])} | "
               f"{number(limit['max'])} | `{limit['default']}` | {limit['help']} |")
        assert row in text, row
    assert len(re.findall(r"^\| `\w+` \| (?:integer|number) \|", text, re.M)) == len(limits())
    refused = text.split("| Refused names |", 1)[1].split("\n", 1)[0]
    assert {n.lower() for n in re.findall(r"`([\w-]+)`", refused)} == RESERVED_HEADERS


def test_every_credential_option_has_its_row() -> None:
    text = PAGE.read_text()
    for name, field in CredentialChanges.model_fields.items():
        row = re.search(rf"^\| `{name}` \| `--[\w-]+[^|]*` \| [^|]+ \| ([^|]+) \|$", text, re.M)
        assert row, name
        if field.description:
            assert row.group(1).strip() == field.description, name


def test_the_oauth2_table_is_the_models() -> None:
    text = PAGE.read_text().split("## OAuth2 options", 1)[1].split("\n## ", 1)[0]
    for spec in fields():
        row = f"| `{spec['name']}` | `{spec['flag']} {spec['metavar']}` | text |"
        assert row in text and text.split(row, 1)[1].split("\n", 1)[0].endswith(
            f"| {spec['help']} |"), row
    assert len(re.findall(r"^\| `oauth2_\w+` \|", text, re.M)) == len(fields())
