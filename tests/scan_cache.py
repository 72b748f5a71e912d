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


def with_files(version: str, files: Iterable[tuple[str, Path]]) -> str:
    """A version string that also names the bytes of what configures the scanner."""
    return f"{version}\0{inputs_digest('configuration', '', files)}"


def scan_each(
    scanner: str,
    version: str,
    files: list[tuple[str, Path]],
    run: Callable[[list[tuple[str, Path]]], dict[str, Any]],
    clean: Callable[[Any], bool],
    folder: Path = FOLDER,
) -> dict[str, Any]:
    """Each file's result, by name, for a scanner that judges each file on its own (cfn-lint's
    and checkov's rules read one template): ``run`` gets only the files without a kept clean
    result over the same bytes and returns a result for each, so after a change to the app only
    the templates it changed are scanned again."""
    if os.environ.get("TEST_SYNTH_CACHE") == "run":
        return run(files)
    kept = {
        name: folder / f"{scanner}-{inputs_digest(scanner, version, [('', path)])}.json"
        for name, path in files
    }
    results = {name: json.loads(path.read_text()) for name, path in kept.items() if path.exists()}
    todo = [(name, path) for name, path in files if name not in results]
    if todo:
        fresh = run(todo)
        folder.mkdir(parents=True, exist_ok=True)
        for name, _ in todo:
            results[name] = fresh[name]
            if clean(fresh[name]):
                writing = kept[name].with_name(f"{kept[name].name}.{os.getpid()}.writing")
                writing.write_text(json.dumps(fresh[name]))
                writing.rename(kept[name])
    return results
