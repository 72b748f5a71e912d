"""Read the installed vLLM/Ray in a child interpreter: importing them here would start Ray's and
vLLM's module state in the pytest process before the local cluster's environment is set."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def probe(code: str, argument: object) -> dict[str, Any]:
    """Run ``code`` with ``argument`` (as JSON in argv[1]); its last stdout line is JSON."""
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argument)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
