"""The README and the docs pages (docs/): every relative link resolves, anchors
included; no page cites an issue number or a file the repository does not have; every
page is in the site's navigation; every marked snippet is run by a test.

The site build itself (``python3 deploy/dev.py docs``: mkdocs --strict, offline) runs in
.ci/run; ``test_site_builds`` runs it too, so a broken page fails here first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONTENT = ROOT / "docs"
PAGES = sorted(CONTENT.rglob("*.md"))
DOCUMENTS = [ROOT / "README.md", *PAGES]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(path: Path) -> str:
    """The Markdown of ``path`` without its fenced code blocks."""
    return FENCE.sub("", path.read_text())


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    """Heading anchors, and the module paths of mkdocstrings' ``::: module`` sections."""
    text = prose(path)
    return {slug(h) for h in HEADING.findall(text)} | set(re.findall(r"^::: ([\w.]+)", text, re.M))


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("<")]


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCUMENTS, ids=name)
def test_relative_links_resolve(doc: Path) -> None:
    broken = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file {dest}")
            continue
        generated = dest.suffix == ".md" and "<!-- generated:" in dest.read_text()
        if anchor and dest.suffix == ".md" and not generated and anchor not in anchors(dest):
            broken.append(f"{target}: {name(dest)} has no heading #{anchor}")
    assert not broken, f"{name(doc)}: broken links:\n" + "\n".join(broken)


def test_links_are_found() -> None:
    """The link pattern sees the README's links (a pattern that matched nothing would pass
    every page)."""
    links = relative_links(ROOT / "README.md")
    assert "docs/getting-started.md" in links
    assert len(links) >= 15


# Every Markdown file of the repository, the docs site's and the others (bench/, tests/...).
EVERY_MARKDOWN = sorted(p for p in ROOT.rglob("*.md")
                        if not {".venv", "site", ".git", "node_modules"} & set(p.parts)
                        and ".egg-info" not in p.as_posix())


@pytest.mark.parametrize("doc", EVERY_MARKDOWN, ids=name)
def test_no_issue_numbers_or_missing_files(doc: Path) -> None:
    text = doc.read_text()
    assert not re.findall(r"\bissues?\s*#?\d+", text, re.I), f"{name(doc)} cites an issue"
    assert "DESIGN.md" not in text, f"{name(doc)} cites DESIGN.md, not in the repository"


def test_every_markdown_file_is_checked() -> None:
    """The list above finds the pages outside docs/ too."""
    names = {name(p) for p in EVERY_MARKDOWN}
    assert {"README.md", "bench/README.md", "docs/index.md",
            "tests/django_project/README.md"} <= names


def test_readme_is_short_and_keeps_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    first_block = re.search(r"```sh\n(.*?)\n```", text, re.S)
    assert first_block
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["python3 deploy/dev.py demo", "python3 deploy/dev.py test"]


def nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in nav_pages(value)]
    return []


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "docs" / "mkdocs" / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(CONTENT)) for p in PAGES)
    assert sorted(listed) == on_disk


def test_every_marked_snippet_is_run_by_a_test() -> None:
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py")
                      if p.name != Path(__file__).name)
    markers = [(name(p), m) for p in PAGES
               for m in re.findall(r"^<!-- ([\w-]+) -->\n```", p.read_text(), re.M)]
    assert markers
    unrun = [f"{page}: {m}" for page, m in markers if m not in tests]
    assert not unrun, "snippets no test reads: " + ", ".join(unrun)


@pytest.mark.slow
def test_site_builds(tmp_path: Path) -> None:
    """mkdocs build --strict (as .ci/run): warnings, broken links or anchors fail it."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    mkdocs = Path(sys.executable).parent / "mkdocs"
    config = str(ROOT / "docs" / "mkdocs" / "mkdocs.yml")
    done = subprocess.run([str(mkdocs), "build", "--strict", "-f", config,
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    settings = (tmp_path / "site" / "reference" / "settings" / "index.html").read_text()
    assert "OUTBOX_LEASE_SECONDS" in settings and "OUTBOX_ADMIN_TOKEN" in settings
    api = (tmp_path / "site" / "reference" / "http-api" / "index.html").read_text()
    assert "/api/dead/replay" in api
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "outbox endpoints rotate-secret" in cli


# A repository path in prose or code: dir/.../name.ext
PATH_REF = re.compile(r"(?<![\w/.-])((?:[\w-]+/)+[\w.-]+\.(?:py|md|sql|toml|ya?ml|html|css|sh))\b")
# Installed paths (the wheel's layout) name the repository's files under another folder.
INSTALLED = {"outbox/migrations/": "migrations/", "outbox/delivery/": "delivery/"}


def _referring_files() -> list[Path]:
    """The docs and the sources whose text may name a repository file. Not migrations/:
    a shipped migration's text is checksummed and never edited."""
    sources = [p for folder in ("outbox", "delivery", "bench", "tests", "deploy")
               for p in (ROOT / folder).rglob("*.py") if "outbox/delivery" not in p.as_posix()]
    return [*EVERY_MARKDOWN, *sources]


def _exists(ref: str, where: Path) -> bool:
    for installed, source in INSTALLED.items():
        if ref.startswith(installed):
            ref = source + ref[len(installed):]
    bases = (ROOT, where.parent, CONTENT, ROOT / "outbox", ROOT / "tests")
    return any((base / ref).exists() for base in bases)


def test_every_named_repository_file_exists() -> None:
    """A path such as ``tests/support/pg.py`` or ``guides/ordering.md`` written in the docs
    or in a docstring or comment names a file the repository has (a moved or deleted file
    leaves no stale path behind)."""
    files = _referring_files()
    stale = sorted({f"{name(p)}: {ref}" for p in files
                    for ref in PATH_REF.findall(p.read_text()) if not _exists(ref, p)})
    assert len(files) > 100 and not stale, "names of files not in the repository:\n" + \
        "\n".join(stale)
