"""A reference to a part of a page by its title (`docs/configuration.md, 'Engine options'`, as
messages, setting descriptions and the pages themselves write them) names a part that page has:
a heading, a bold paragraph title (`**EFA runbook.**`) or a table row's first cell (an alarm's
name). The generated configuration reference is Markdown too, so the settings' descriptions are
checked with the pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.configurations import PROJECT_ROOT

REFERENCE = re.compile(r"""docs/([a-z0-9-]+)\.md,\s+(['"])([^'"{}]+)\2""")
PAGES = [*sorted((PROJECT_ROOT / "docs").glob("*.md")), PROJECT_ROOT / "README.md"]
SOURCES = [*PAGES, *sorted((PROJECT_ROOT / "pdctl").glob("*.py"))]


def _titles(page: Path) -> list[str]:
    text = page.read_text()
    found = [line.lstrip("#") for line in text.splitlines() if line.startswith("#")]
    found += re.findall(r"\*\*([^*]+)\*\*", text)
    found += re.findall(r"^\| `([^`]+)`", text, re.MULTILINE)
    return [" ".join(title.replace("`", "").split()).lower() for title in found]


def dangling(text: str) -> list[str]:
    flat = " ".join(text.split())
    return [
        f"docs/{page}.md, {title!r}"
        for page, _, title in REFERENCE.findall(flat)
        if not (PROJECT_ROOT / "docs" / f"{page}.md").exists()
        or not any(
            t.startswith(title.lower()) for t in _titles(PROJECT_ROOT / "docs" / f"{page}.md")
        )
    ]


@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.name)
def test_every_reference_to_a_part_of_a_page_names_a_part_it_has(source: Path) -> None:
    assert dangling(source.read_text()) == []


def test_the_check_finds_a_reference_to_a_part_that_is_not_there() -> None:
    missing = "No such part"  # spelled apart: the repository's own citation check reads this file
    assert dangling(f"(docs/configuration.md, '{missing}')") == [
        f"docs/configuration.md, '{missing}'"
    ]
    assert dangling("(docs/observability.md, 'EFA runbook')") == []


@pytest.mark.parametrize("source", PAGES, ids=lambda path: path.name)
def test_no_page_speaks_of_the_teams_internal_planning_documents(source: Path) -> None:
    """A reader has no "design card": the pages say why in their own words."""
    assert "design card" not in " ".join(source.read_text().split()).lower()
