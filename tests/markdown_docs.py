"""What the docs point at, read the way a reader's tools read them: links and anchors as GitHub
renders Markdown (markdown-it, CommonMark), commands as a shell splits them. Shared by the docs
tests (tests/config/test_docs_links.py)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.configurations import PROJECT_ROOT

# Generated or installed, not the repository's own pages.
NOT_SOURCES = {
    ".git",
    ".venv",
    ".venv-checkov",
    "node_modules",
    "cdk.out",
    "build",
    ".pytest_cache",
}
SHELL_FENCES = {"bash", "sh", "shell", "console", ""}


def markdown_files() -> list[Path]:
    """Every Markdown page of the repository (not those of installed packages or outputs)."""
    return sorted(
        path
        for path in PROJECT_ROOT.rglob("*.md")
        if not NOT_SOURCES & set(path.relative_to(PROJECT_ROOT).parts)
    )


@cache
def _tokens(path: Path) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(path.read_text())


def _inline_children(path: Path) -> Iterator[Token]:
    for token in _tokens(path):
        if token.type == "inline":
            yield from token.children or []


def github_anchor(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped, spaces to hyphens
    (github/cmark-gfm's anchor filter: keeps letters, digits, '_', '-' and spaces)."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The ids GitHub gives the page's headings; a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    ids = set()
    tokens = _tokens(path)
    for index, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        inline = tokens[index + 1]
        text = "".join(
            child.content
            for child in inline.children or []
            if child.type in ("text", "code_inline")
        )
        anchor = github_anchor(text)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        ids.add(anchor if count == 0 else f"{anchor}-{count}")
    return frozenset(ids)


def links(path: Path) -> list[str]:
    """Link and image targets, as written."""
    found = []
    for child in _inline_children(path):
        if child.type == "link_open":
            found.append(str(child.attrs["href"]))
        elif child.type == "image":
            found.append(str(child.attrs["src"]))
    return found


def code_spans(path: Path) -> list[str]:
    return [child.content for child in _inline_children(path) if child.type == "code_inline"]


def shell_lines(path: Path) -> list[str]:
    """Lines of shell code blocks, without prompts and comments."""
    lines = []
    for token in _tokens(path):
        if token.type != "fence" or token.info.strip() not in SHELL_FENCES:
            continue
        for line in token.content.splitlines():
            line = line.strip().removeprefix("$ ")
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


@dataclass(frozen=True)
class Command:
    """One invocation of a tool of ours: `make ...` or `pdctl ...`."""

    tool: str
    words: list[str]


def _words(text: str) -> list[str]:
    text = re.sub(r"<[^>]*>", "<_>", text)  # `<role ARN>`: one word the reader fills in
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in a span that shows a fragment
        return text.split()


def commands(path: Path) -> list[Command]:
    """Every `make` and `pdctl` invocation in shell blocks and code spans; a line joined with
    `&&` or `;` is several."""
    found = []
    for text in shell_lines(path) + code_spans(path):
        for part in re.split(r"&&|\|\||;|\|", text):
            words = _words(part)
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value prefixes
            if words and Path(words[0]).name in ("make", "pdctl"):
                found.append(Command(Path(words[0]).name, words[1:]))
    return found


def top_level_entries() -> set[str]:
    return {
        entry.name
        for entry in PROJECT_ROOT.iterdir()
        if entry.name not in NOT_SOURCES and not entry.name.startswith(".git")
    }


def repository_paths(path: Path) -> list[str]:
    """Words that name a file or folder of this repository: the first segment is a top-level
    entry of it (so `ray/serve/...` of another project and `/dev/shm` are not ours)."""
    roots = top_level_entries()
    found = []
    for text in code_spans(path) + shell_lines(path):
        for word in _words(text):
            word = word.rstrip(".,:;)")
            first = word.split("/", 1)[0]
            if "/" in word and first in roots and "://" not in word:
                found.append(word)
    return found


def repository_has(reference: str) -> bool:
    """A path as the docs write it: placeholders (`<stack>`), globs and brace lists allowed."""
    pattern = re.sub(r"<[^>]*>", "*", reference)
    pattern = re.sub(r"\{[^}]*\}", "*", pattern).rstrip("/")
    return any(PROJECT_ROOT.glob(pattern)) if "*" in pattern else (PROJECT_ROOT / pattern).exists()
