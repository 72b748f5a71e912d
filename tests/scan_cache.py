"""A scanner's clean result, kept while everything it reads is byte for byte the same.

cfn-lint's and checkov's findings, and promtool's verdict on the alert rules' unit tests, depend
on the files they read, their configuration and their installed version alone, so a run over the
same bytes would find the same; with the synth cache
(tests/conftest.py) warm, the templates are the same bytes as the last run's. A result is kept
only when it is clean (a finding makes the scanner run again every time, to show it), under
build/test-scans/, named by a hash of the scanner, its version and configuration, and every
input's name and bytes; TEST_SYNTH_CACHE=run keeps nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.configurations import PROJECT_ROOT

FOLDER = PROJECT_ROOT / "build" / "test-scans"


def inputs_digest(scanner: str, version: str, files: Iterable[tuple[str, Path]]) -> str:
    """``files``: (the name the scanner reports it under, its path)."""
    digest = hashlib.sha256(f"{scanner}\0{version}\0".encode())
    for name, path in sorted(files):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def scan_once(
    scanner: str,
    version: str,
    files: Iterable[tuple[str, Path]],
    run: Callable[[], dict[str, Any]],
    clean: Callable[[dict[str, Any]], bool],
    folder: Path = FOLDER,
) -> dict[str, Any]:
    """``run()``'s result (JSON-able), or the kept result of a clean run over the same inputs."""
    if os.environ.get("TEST_SYNTH_CACHE") == "run":
        return run()
    kept = folder / f"{scanner}-{inputs_digest(scanner, version, files)}.json"
    if kept.exists():
        return json.loads(kept.read_text())
    result = run()
    if clean(result):
        folder.mkdir(parents=True, exist_ok=True)
        writing = kept.with_name(f"{kept.name}.{os.getpid()}.writing")
        writing.write_text(json.dumps(result))
        writing.rename(kept)  # whole, or not there
    return result


def files_under(folder: Path) -> list[tuple[str, Path]]:
    return [(str(p.relative_to(folder)), p) for p in sorted(folder.rglob("*")) if p.is_file()]
