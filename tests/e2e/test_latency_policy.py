"""The latency policy inside a real Ray Serve 2.58 controller (the e2e venv's Ray, its own local
Ray in a subprocess, not the session's P/D cluster): Serve imports LatencyObjectivePolicy from
serve_extensions by the rendered policy_function, instantiates it with the rendered
policy_kwargs, reads the replicas' custom latency metrics through it, and scales the side over
its objective while the side within it stays (tests/e2e/latency_policy_app.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Not imported from the app: it imports Ray, which must not be imported in this process before
# the session's local Ray environment is set (harness.LocalRay); the app reports its bound.
APP = Path(__file__).resolve().parent / "latency_policy_app.py"


def test_serve_scales_the_side_over_its_objective_and_leaves_the_other() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_ADDRESS")}
    done = subprocess.run(
        [sys.executable, str(APP)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(line)
    replicas = result["replicas"]
    # prefill reports 2 s against 1 s: up to max_replicas; decode 10 ms against 50 ms: held at 1
    assert result["max_replicas"] > 1
    assert replicas == {"Prefill:model": result["max_replicas"], "Decode:model": 1, "Ingress": 1}
