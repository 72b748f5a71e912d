"""A deterministic computation's result, computed by one xdist worker and kept while everything it
reads is byte for byte the same: the simulations of the latency policy (tools/latency_replay*.py)
replay 90 minutes of Serve's loop each, seconds of CPU, and a module-scoped fixture ran them once
in every worker that drew one of the module's tests (three times over on the 2-core machine: 67 s
of worker time in a warm run of 117 s, docs/verification.md "Benchmarks", 2026-12-07).

The same rule as the synth and scan caches (tests/conftest.py, tests/scan_cache.py): the result is
kept under build/test-computed/, named by a hash of the inputs' names and bytes, the Python
version and the installed distributions' versions, so a change to any input computes it again;
TEST_SYNTH_CACHE=run keeps it to one run (still one worker computes it, the others wait and read).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import TypeVar

from tests import scan_cache
from tests.configurations import PROJECT_ROOT

FOLDER = PROJECT_ROOT / "build" / "test-computed"
# What the policy's simulations read: the replay tools, the policy, the defaults of the serving
# settings they start from (app_config, the catalog under it) and the real-engine figures fitted.
SIMULATION_INPUTS = ("tools", "serve_extensions", "app_config", "catalog", "docs/gpu-bench")

T = TypeVar("T")


def inputs_digest(name: str, inputs: Iterable[str], root: Path = PROJECT_ROOT) -> str:
    """scan_cache's hash of every file under each of ``inputs`` (paths relative to ``root``,
    but for bytecode), with the Python version and the installed distributions' names and
    versions as the version."""
    files = []
    for each in inputs:
        path = root / each
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        files += [
            (str(file.relative_to(root)), file)
            for file in found
            if file.is_file() and "__pycache__" not in file.parts
        ]
    packages = sorted(f"{d.name}=={d.version}" for d in metadata.distributions())
    return scan_cache.inputs_digest(name, "\n".join([sys.version, *packages]), files)


def computed_once(
    name: str,
    compute: Callable[[], T],
    inputs: Iterable[str] = SIMULATION_INPUTS,
    folder: Path = FOLDER,
    root: Path = PROJECT_ROOT,
) -> T:
    """``compute()``'s result (picklable), computed by the first worker that asks, under a file
    lock, and read from disk by every other and by later runs over the same inputs."""
    if os.environ.get("TEST_SYNTH_CACHE") == "run":
        # this run's workers share pytest-xdist's run id
        folder = folder / f"run-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / f"{name}-{inputs_digest(name, inputs, root)}.pickle"
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kept.exists():
            return pickle.loads(kept.read_bytes())
        result = compute()
        writing = kept.with_name(f"{kept.name}.{os.getpid()}.writing")
        writing.write_bytes(pickle.dumps(result))
        writing.rename(kept)  # whole, or not there
        return result
