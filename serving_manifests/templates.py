"""Reads the YAML files under manifests/; every call returns a fresh copy to fill in."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"


@cache
def _documents(name: str) -> tuple[str, ...]:
    return tuple(
        yaml.safe_dump(document) for document in yaml.safe_load_all((MANIFESTS / name).read_text())
    )


def load_all(name: str) -> list[dict[str, Any]]:
    return [yaml.safe_load(document) for document in _documents(name)]


def load(name: str) -> dict[str, Any]:
    (document,) = load_all(name)
    return document
