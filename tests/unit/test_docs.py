"""The README and docs/ stand on their own in a clone: every link resolves inside it."""

from __future__ import annotations

import re
import subprocess
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


CITABLE_SUFFIXES = {".py", ".md", ".sh", ".yml", ".yaml", ".proto", ".toml", ".properties", ""}
OUTSIDE_CITATION = re.compile(
    r"DESIGN\.md|\.\./shared|perf-ecosystem\.md|kafka-replication\.md|\.zh\.txt|\b[Ii]ssue \d+"
)


def test_the_code_and_docs_cite_only_what_the_repository_holds() -> None:
    """docs/ states the contracts; a clone has no design file or notes beside it, and an
    issue number means nothing to a reader of the code. bench/RESULTS.md is a log of
    past runs and keeps its history."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in CITABLE_SUFFIXES or name == "bench/RESULTS.md":
            continue
        if name.endswith(("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")) or not path.is_file():
            continue
        if path == Path(__file__):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE_CITATION.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_readme_links_every_page_of_docs() -> None:
    readme = (REPO / "README.md").read_text()
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in readme, page.name
