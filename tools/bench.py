"""`make bench`: wall time of `cdk synth` (cold and warm) and of the test suite, as medians.

Cold: no cdk.out and no Python bytecode cache. Warm: the same command again with both present.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tools.efa_coverage import efa_coverage

ROOT = Path(__file__).resolve().parent.parent
RUNS = 3


def _timed(command: list[str], prepare: Callable[[], None] = lambda: None) -> float:
    prepare()
    start = time.perf_counter()
    subprocess.run(
        command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def _cold() -> None:
    shutil.rmtree(ROOT / "cdk.out", ignore_errors=True)
    for cache in ROOT.glob("**/__pycache__"):
        if ".venv" not in cache.parts and "node_modules" not in cache.parts:
            shutil.rmtree(cache, ignore_errors=True)


def _median(command: list[str], prepare: Callable[[], None] = lambda: None) -> float:
    return statistics.median(_timed(command, prepare) for _ in range(RUNS))


def main() -> None:
    synth = [str(ROOT / "node_modules" / ".bin" / "cdk"), "synth", "--no-notices", "--quiet"]
    pytest = [str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider"]
    results = {
        "cdk synth, cold": _median(synth, _cold),
        "cdk synth, warm": _median(synth),
        "test suite (pytest)": _median(pytest),
    }
    cores = os.cpu_count()
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"machine: {cores} cores, {memory_gib:.0f} GiB; median of {RUNS} runs")
    for name, seconds in results.items():
        print(f"  {name:<22} {seconds:6.1f} s")
    print("EFA interfaces attached / network cards:")
    for name, ratio in efa_coverage().items():
        print(f"  {name:<22} {ratio:.2f}")


if __name__ == "__main__":
    main()
