"""The README and docs/ stand on their own in a clone: every link resolves inside it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_readme_and_docs_links_resolve_inside_the_repository(page: Path) -> None:
    text = page.read_text()
    assert "../shared" not in text, "a clone has no ../shared: link the project's own docs"
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(REPO), f"{page.name}: {target} leaves the repository"
        assert resolved.exists(), f"{page.name}: {target} does not exist"


def test_the_readme_links_the_user_contracts() -> None:
    readme = (REPO / "README.md").read_text()
    for doc in ("docs/cli.md", "docs/storage.md", "docs/zookeeper.md", "docs/audit.md"):
        assert f"]({doc})" in readme, doc
