"""Versions in what users read come from the catalog (catalog/ray_llm_image.py RAY, VLLM).

An image upgrade is one row in the catalog: a message or a setting's description that spells
"Ray 2.58" or "vLLM 0.26" itself would go on naming the old version after it. Docstrings and
comments cite the source a rule was read from and keep their version; string literals that reach
users (messages, descriptions, refusals) may not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = (
    "app_config",
    "catalog",
    "constructs",
    "monitoring",
    "nag",
    "pdctl",
    "serve_extensions",
    "serving_manifests",
    "stacks",
)
# A product and a version number: "Ray 2.58", "vLLM 0.26.0", "Ray Serve LLM 2.58", "NIXL 1.3".
VERSIONED_NAME = re.compile(r"\b(Ray|vLLM|NIXL|Serve|LLM)\s+\d+\.\d+")
# The catalog's own rows name versions by definition.
CATALOG_ROWS = {"catalog/ray_llm_image.py"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def literals_naming_versions(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string literal outside docstrings that names a product version."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and VERSIONED_NAME.search(node.value)
        ):
            hits.append((node.lineno, node.value))
    return hits


def product_files() -> list[str]:
    return sorted(
        str(path.relative_to(ROOT))
        for package in PRODUCT_PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if str(path.relative_to(ROOT)) not in CATALOG_ROWS
    )


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('MESSAGE = "refused: in Ray 2.58 it stalls"', True),
        ('MESSAGE = f"refused: in {RAY} it stalls"', False),
        ('def f():\n    """Ray 2.58 ray/serve/config.py says so."""', False),
        ('HINT = "vLLM 0.26.0 refuses it"', True),
        ("X = 1  # vLLM 0.26 config/vllm.py", False),
    ],
)
def test_the_check_tells_a_literal_from_a_citation(source: str, found: bool) -> None:
    assert bool(literals_naming_versions(source)) is found


def test_no_message_spells_a_version_the_catalog_owns() -> None:
    hits = [
        f"{name}:{line}: {text[:80]!r}"
        for name in product_files()
        for line, text in literals_naming_versions((ROOT / name).read_text())
    ]
    assert hits == [], "use catalog.ray_llm_image's RAY / VLLM (or the image row) instead"
