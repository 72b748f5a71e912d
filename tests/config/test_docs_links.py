"""Every link, anchor, command and path the docs give a reader leads somewhere real: relative links
to files that exist and headings GitHub gives those ids, `make` targets of the Makefile, `pdctl`
subcommands with their options, repository paths, and the tests the docs cite by name."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import typer

from pdctl.cli import app
from tests.configurations import PROJECT_ROOT
from tests.markdown_docs import (
    NOT_SOURCES,
    anchors,
    code_spans,
    commands,
    github_anchor,
    links,
    markdown_files,
    repository_has,
    repository_paths,
)

PAGES = markdown_files()
IDS = [str(page.relative_to(PROJECT_ROOT)) for page in PAGES]


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... : not ours to check
            continue
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists() or not (linked.is_relative_to(PROJECT_ROOT) or linked == page):
            broken.append(f"{target}: no such file")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{target}: no heading with that id in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert _broken_links(page) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    page = PROJECT_ROOT / "docs" / "README.md"
    bad = tmp_path / "page.md"
    bad.write_text(
        f"[gone]({page.parent}/gone.md) [anchor]({page}#no-such-heading) [ok]({page})\n"
        "# A heading\n[self](#a-heading) [self, wrong](#b-heading)\n"
    )
    assert [problem.split(":")[1] for problem in _broken_links(bad)] == [
        " no such file",
        " no heading with that id in README.md",
        " no heading with that id in page.md",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [  # ids as github.com gives them to these headings
        ("`pdctl verify` (after deploy)", "pdctl-verify-after-deploy"),
        ("What runs before deploy: `make e2e`", "what-runs-before-deploy-make-e2e"),
        (
            "Device plugins: the EFA device plugin, not the EFA DRA driver",
            "device-plugins-the-efa-device-plugin-not-the-efa-dra-driver",
        ),
        (
            "Deviation from the design card: Kubernetes 1.35, not 1.29",
            "deviation-from-the-design-card-kubernetes-135-not-129",
        ),
    ],
)
def test_anchors_follow_githubs_rule(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


@cache
def _make_targets() -> frozenset[str]:
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([a-z0-9][a-z0-9-]*):", makefile, flags=re.MULTILINE))


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_make_target_in_the_docs_exists(page: Path) -> None:
    unknown = [
        word
        for command in commands(page)
        if command.tool == "make"
        for word in command.words
        if not word.startswith("-") and "=" not in word and word not in _make_targets()
    ]
    assert unknown == []


def _pdctl_problems(words: list[str]) -> list[str]:
    group = typer.main.get_command(app)  # typer's click: subcommands in .commands
    if not words or words[0].startswith("-"):
        options = {opt for param in group.params for opt in param.opts + param.secondary_opts}
        options |= {"--help"}
        return [word for word in words if word.startswith("--") and word not in options]
    name, *rest = words
    command = group.commands.get(name)  # type: ignore[attr-defined]
    if command is None:
        return [f"no subcommand {name!r}"]
    options = {opt for param in command.params for opt in param.opts + param.secondary_opts}
    options |= {"--help"}
    written = [
        option.split("=", 1)[0]
        for word in rest
        if word.startswith("--")
        for option in word.split("/")  # `--prefill-node/--decode-node`: either
    ]
    return [f"{name} {option}" for option in written if option not in options]


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_pdctl_command_and_option_in_the_docs_exists(page: Path) -> None:
    problems = [
        problem
        for command in commands(page)
        if command.tool == "pdctl"
        for problem in _pdctl_problems(command.words)
    ]
    assert problems == []


def test_the_pdctl_check_finds_a_wrong_subcommand_and_option() -> None:
    assert _pdctl_problems(["verify", "--url", "http://x", "--metrics-wait", "5"]) == []
    assert _pdctl_problems(["verfiy"]) == ["no subcommand 'verfiy'"]
    assert _pdctl_problems(["verify", "--urls", "x"]) == ["verify --urls"]


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_repository_path_in_the_docs_exists(page: Path) -> None:
    assert [path for path in repository_paths(page) if not repository_has(path)] == []


@cache
def _test_names() -> tuple[frozenset[str], frozenset[str]]:
    files = [path for path in (PROJECT_ROOT / "tests").rglob("test_*.py")]
    functions = {
        name
        for path in files
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.MULTILINE)
    }
    return frozenset(functions), frozenset(path.name for path in files)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_test_the_docs_cite_exists(page: Path) -> None:
    functions, files = _test_names()
    cited = [span for span in code_spans(page) if re.fullmatch(r"test_\w+(\.py)?", span)]
    assert [span for span in cited if span not in functions | files] == []


SOURCE_SUFFIXES = {".py", ".yaml", ".yml", ".sh"}
# `docs/operating.md, 'Upgrading'`, `README, "Status"`, `docs/observability.md, *Operating*`:
# a page of ours, then the words of it a reader should look for.
DOC_REFERENCE = re.compile(
    r"(?<![\w/.])(README(?:\.md)?|docs/[\w-]+\.md)[,:]?\s+"
    r"(?:'([^'{}\n]+)'|\"([^\"{}\n]+)\"|\*([^*{}\n]+)\*)"
)
DOC_PAGE = re.compile(r"(?<![\w/.])docs/[\w-]+\.md")


def _source_files() -> list[Path]:
    tracked = [
        path
        for path in PROJECT_ROOT.rglob("*")
        if path.is_file()
        and (path.suffix in SOURCE_SUFFIXES or path.name in ("Makefile", "run"))
        and not NOT_SOURCES & set(path.relative_to(PROJECT_ROOT).parts)
        and "data" not in path.relative_to(PROJECT_ROOT).parts[:2]
        and path != Path(__file__)  # its own examples of broken references
    ]
    return sorted(tracked)


def _plain(text: str) -> str:
    """Markdown's emphasis and code marks dropped: what a reader sees and searches for."""
    return re.sub(r"\s+", " ", text.replace("`", "").replace("*", ""))


def _broken_doc_references(text: str) -> list[str]:
    broken = [
        f"{page}: no such page"
        for page in DOC_PAGE.findall(text)
        if not (PROJECT_ROOT / page).exists()
    ]
    for match in DOC_REFERENCE.finditer(text):
        page = PROJECT_ROOT / ("README.md" if match[1].startswith("README") else match[1])
        words = next(group for group in match.groups()[1:] if group)
        if page.exists() and _plain(words) not in _plain(page.read_text()):
            broken.append(f"{match[1]}: no {words!r} in it")
    return broken


def test_every_page_the_code_points_to_says_what_it_is_cited_for() -> None:
    """Alarm descriptions, runbook annotations, error messages and comments send a reader to
    a page and a section: both must be there."""
    broken = {
        str(path.relative_to(PROJECT_ROOT)): problems
        for path in _source_files()
        if (problems := _broken_doc_references(path.read_text(errors="replace")))
    }
    assert broken == {}


def test_the_reference_check_finds_a_moved_section() -> None:
    assert _broken_doc_references("see docs/operating.md, 'Upgrading'") == []
    assert _broken_doc_references('see README, "Two commands"') == []
    assert _broken_doc_references("see README, 'Upgrading'") == ["README: no 'Upgrading' in it"]
    assert _broken_doc_references("docs/gone.md") == ["docs/gone.md: no such page"]
