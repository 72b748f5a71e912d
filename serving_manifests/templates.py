"""Reads the YAML files under manifests/; every call returns a fresh copy to fill in."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"

# libyaml's loader where PyYAML was built with it: the same documents, several times faster.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _documents(name: str) -> tuple[Any, ...]:
    """Parsed once per process: every rule that renders a pod (node fit on each synth and each
    `pdctl` call) reads the same templates, and parsing YAML cost more than the rendering."""
    documents = yaml.load_all((MANIFESTS / name).read_text(), Loader=_LOADER)
    # Keys in sorted order, as the templates have always been rendered (safe_dump sorts): the
    # order is part of every synthesized template and its snapshot.
    return tuple(yaml.load(yaml.safe_dump(d), Loader=_LOADER) for d in documents)


def load_all(name: str) -> list[dict[str, Any]]:
    return [copy.deepcopy(document) for document in _documents(name)]


def load(name: str) -> dict[str, Any]:
    (document,) = load_all(name)
    return document
