"""gpu_nodes.shared on Ray 2.58's own scheduler: one worker pod holds both sides, and each
side's placement groups take only its share of the pod's GPUs, the two sides' engine actors on
disjoint GPU ids (docs/architecture.md, 'Prefill and decode on one node').

The RayService is what the app renders for examples/trial-one-node.yaml (`tools.write_manifests`
in the project's venv); shared_node_probe.py places it on a local Ray node that advertises
exactly the rendered pod's GPUs and resources, in a process of its own, started when the session
has collected these tests and run beside the other modules (conftest.py, harness.Background).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import PROJECT_ROOT, RAYSERVICE, Background, Scenario, Synthesized, rendering

EXAMPLE = PROJECT_ROOT / "examples" / "trial-one-node.yaml"
SCENARIO = "shared-node-placement"


def background_scenarios(synthesized: Synthesized, out: Path) -> dict[str, Scenario]:
    """Started at collection (conftest.py pytest_collection_finish): the example rendered by
    the project's code, then placed."""
    folder = out / SCENARIO
    render = rendering(folder, example={"config": EXAMPLE})
    args = (str(folder / "example" / RAYSERVICE), str(out / f"{SCENARIO}.json"))
    return {SCENARIO: Scenario("shared_node_probe.py", args, render)}


@pytest.fixture(scope="module")
def placed(background: Background) -> dict[str, Any]:
    return background.result(SCENARIO)


def test_each_side_gets_its_share_of_the_pods_gpus(placed: dict[str, Any]) -> None:
    for side, ids in placed["gpu_ids"].items():
        assert len(ids) == placed["resources"][side]  # one GPU per engine worker, its share


def test_the_two_sides_never_share_a_gpu_and_leave_none_idle(placed: dict[str, Any]) -> None:
    prefill, decode = (set(placed["gpu_ids"][side]) for side in ("prefill", "decode"))
    assert not prefill & decode
    assert len(prefill | decode) == placed["pod_gpus"]


def test_a_sides_resource_not_the_free_gpus_bounds_its_replicas_on_a_node(placed) -> None:
    """With prefill placed, decode's GPUs are still free, and a second prefill replica may not
    take them: Ray's autoscaler asks for another node instead."""
    assert placed["second_prefill_fits_beside_prefill"] is False
