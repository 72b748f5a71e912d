"""Several `vllm bench serve` points in one process: the same entry point the `vllm bench serve`
command calls (vllm/entrypoints/cli/benchmark/serve.py: ``add_cli_args`` then ``main``, v0.26.0),
without paying vLLM's import (10 s and more) once per point.

    python -m tools.gpu_bench.points '[["--backend", "openai", ...], ...]'
"""

from __future__ import annotations

import json
import sys
import traceback


def main() -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    failed = 0
    for argv in json.loads(sys.argv[1]):
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        try:
            bench(parser.parse_args(argv))
        except Exception:  # one point's failure is recorded; the sweep goes on
            traceback.print_exc()
            failed += 1
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
