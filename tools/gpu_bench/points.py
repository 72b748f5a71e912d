"""Several `vllm bench serve` points in one process: the same entry point the `vllm bench serve`
command calls (vllm/entrypoints/cli/benchmark/serve.py: ``add_cli_args`` then ``main``, v0.26.0),
without paying vLLM's import (10 s and more) once per point.

    python -m tools.gpu_bench.points '{"points": [["--backend", "openai", ...], ...],
                                       "pids": {"ingress": [1234], ...}}'

With ``pids``, each point also saves the CPU seconds those processes spent over it, beside its
result file (``cpu_file``), for the Serve processes' cost per streamed token.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from tools.cpu_use import cpu_seconds


def cpu_file(result: Path) -> Path:
    """Where a point's CPU reading lies: beside its `--save-result` file."""
    return result.with_suffix(".cpu.json")


def result_path(argv: list[str]) -> Path:
    return Path(argv[argv.index("--result-dir") + 1]) / argv[argv.index("--result-filename") + 1]


def main() -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    given = json.loads(sys.argv[1])
    pids = given.get("pids") or {}
    failed = 0
    for argv in given["points"]:
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        before, start = cpu_seconds(pids), time.monotonic()
        try:
            bench(parser.parse_args(argv))
        except Exception:  # one point's failure is recorded; the sweep goes on
            traceback.print_exc()
            failed += 1
        if pids:
            after = cpu_seconds(pids)
            spent = {name: round(after[name] - before[name], 3) for name in pids}
            reading = {"wall_s": round(time.monotonic() - start, 3), "cpu_s": spent}
            cpu_file(result_path(argv)).write_text(json.dumps(reading))
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
