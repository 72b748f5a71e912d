"""`make bench`: wall time of `cdk synth` (cold, warm, and against a bare aws-cdk-lib EKS app,
alternated) and of the test suite, as medians.

Cold: no cdk.out and no Python bytecode cache. Warm: the same command again with both present.
The suite is timed both ways too: with its synth and scan caches cleared (build/test-synth,
build/test-scans: the first run after a change to the app, and every CI run) and with them warm
(a run after a change to tests or pdctl only).

`python -m tools.bench synth [--pairs N]` times only the alternated synth pairs (issue 29's
synth target), each pair printed, with the load average around them: on a shared machine the
spread says as much as the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tools.efa_coverage import efa_coverage

ROOT = Path(__file__).resolve().parent.parent
RUNS = 3


def _timed(
    command: list[str], prepare: Callable[[], None] = lambda: None, cwd: Path = ROOT
) -> float:
    prepare()
    start = time.perf_counter()
    subprocess.run(
        command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def _cold() -> None:
    shutil.rmtree(ROOT / "cdk.out", ignore_errors=True)
    for cache in ROOT.glob("**/__pycache__"):
        if ".venv" not in cache.parts and "node_modules" not in cache.parts:
            shutil.rmtree(cache, ignore_errors=True)


def _no_suite_caches() -> None:
    for folder in ("test-synth", "test-scans"):
        shutil.rmtree(ROOT / "build" / folder, ignore_errors=True)


def _median(command: list[str], prepare: Callable[[], None] = lambda: None) -> float:
    return statistics.median(_timed(command, prepare) for _ in range(RUNS))


BARE_APP = ROOT / "tools" / "bare_eks_app" / "app.py"
SYNTH_RUNS = 5


def _synth_pair(cdk: str, pairs: int = SYNTH_RUNS) -> tuple[list[float], list[float]]:
    """`cdk synth` of this app and of the bare EKS app, alternated run by run, so that a drift
    of the machine's speed moves both."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        shutil.copy(BARE_APP, folder / "app.py")
        python = ROOT / ".venv" / "bin" / "python"
        (folder / "cdk.json").write_text(json.dumps({"app": f"{python} app.py"}))
        ours, bare = [], []
        for _ in range(pairs):
            ours.append(_timed([cdk, "synth", "--no-notices", "--quiet"]))
            bare.append(_timed([cdk, "synth", "--no-notices", "--quiet"], cwd=folder))
    return ours, bare


def _load_average() -> str:
    return " ".join(f"{load:.1f}" for load in os.getloadavg())


def synth_only(cdk: str, pairs: int) -> None:
    """The synth pairs alone, each printed: minutes rather than `make bench`'s whole run."""
    print(f"load average (1, 5, 15 min) before: {_load_average()}")
    ours, bare = _synth_pair(cdk, pairs)
    for index, (app, floor) in enumerate(zip(ours, bare, strict=True), start=1):
        print(f"  pair {index}: this app {app:5.1f} s, bare EKS app {floor:5.1f} s")
    print(f"load average (1, 5, 15 min) after:  {_load_average()}")
    app, floor = statistics.median(ours), statistics.median(bare)
    print(f"  medians: this app {app:.1f} s, bare EKS app {floor:.1f} s, ratio {app / floor:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    parser.add_argument("what", nargs="?", choices=["all", "synth"], default="all")
    parser.add_argument("--pairs", type=int, default=SYNTH_RUNS, help="synth pairs (synth only)")
    arguments = parser.parse_args()
    cdk = str(ROOT / "node_modules" / ".bin" / "cdk")
    if arguments.what == "synth":
        synth_only(cdk, arguments.pairs)
        return
    synth = [cdk, "synth", "--no-notices", "--quiet"]
    pytest = [str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider"]
    ours, bare = _synth_pair(cdk)
    results = {
        "cdk synth, cold": _median(synth, _cold),
        "cdk synth, warm": statistics.median(ours),
        "bare EKS app synth": statistics.median(bare),
        "suite, caches cleared": _median(pytest, _no_suite_caches),
        "suite, caches warm": _median(pytest),
    }
    cores = os.cpu_count()
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(
        f"machine: {cores} cores, {memory_gib:.0f} GiB; median of {RUNS} runs "
        f"({SYNTH_RUNS} synth pairs); load average now {_load_average()}"
    )
    for name, seconds in results.items():
        print(f"  {name:<22} {seconds:6.1f} s")
    print(
        "  synth / bare EKS app   "
        f"{results['cdk synth, warm'] / results['bare EKS app synth']:6.2f}"
    )
    print("EFA interfaces attached / network cards:")
    for name, ratio in efa_coverage().items():
        print(f"  {name:<22} {ratio:.2f}")


if __name__ == "__main__":
    main()
