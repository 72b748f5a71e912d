"""The expert-parallel catalog covers what the image's vLLM offers, and its verdicts hang together.

vLLM's names come from catalog/vllm_engine_args.json (generated from vLLM's source by
tools/vllm_engine_args.py; tests/e2e/test_engine_options.py checks it against the installed
vLLM); vLLM's own rules for EPLB and micro-batching are read from the installed vLLM in
tests/e2e/test_expert_parallel_catalog.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from catalog.expert_parallel import (
    ALL2ALL_BACKENDS,
    DUAL_BATCH_OVERLAP_REFUSAL,
    EPLB_CONFIG_ON_EFA,
    EPLB_CONFIG_REASONS,
    MICROBATCHING_ALL2ALL_BACKENDS,
    NCCL_ON_EFA_ENV,
    SUPPORTED_ALL2ALL_BACKENDS,
)
from catalog.ray_llm_image import DEFAULT_IMAGE_TAG, IMAGES

ROOT = Path(__file__).resolve().parents[2]
VLLM_ARGS = json.loads((ROOT / "catalog" / "vllm_engine_args.json").read_text())
REFUSED = {name: reason for name, reason in ALL2ALL_BACKENDS.items() if reason is not None}


def test_the_vllm_argument_list_is_the_images_vllm() -> None:
    assert VLLM_ARGS["vllm_version"] == IMAGES[DEFAULT_IMAGE_TAG].vllm_version


def test_every_all2all_backend_of_the_images_vllm_has_a_verdict() -> None:
    # Same names, same count: a vLLM bump that adds, renames or drops a backend fails here.
    assert sorted(ALL2ALL_BACKENDS) == sorted(VLLM_ARGS["literals"]["All2AllBackend"])
    assert "all2all_backend" in VLLM_ARGS["engine_args"]


def test_exactly_one_all2all_backend_runs_over_efa() -> None:
    assert len(SUPPORTED_ALL2ALL_BACKENDS) == 1
    assert set(SUPPORTED_ALL2ALL_BACKENDS) | set(REFUSED) == set(ALL2ALL_BACKENDS)


@pytest.mark.parametrize("backend", sorted(REFUSED))
def test_every_refusal_is_one_sentence_that_says_what_would_work(backend: str) -> None:
    reason = REFUSED[backend]
    assert reason.strip() == reason
    assert len(reason) > 40
    # One sentence, left unpunctuated: the validator embeds it in its own one-line message.
    assert ". " not in reason
    assert "\n" not in reason
    assert not reason.endswith(".")
    # Either the way out here (a backend that works) or what it would take.
    assert any(name in reason for name in SUPPORTED_ALL2ALL_BACKENDS) or "need" in reason


def test_dual_batch_overlap_needs_a_backend_that_does_not_run_over_efa() -> None:
    assert set(MICROBATCHING_ALL2ALL_BACKENDS) <= set(REFUSED)
    for backend in MICROBATCHING_ALL2ALL_BACKENDS:
        assert backend in DUAL_BATCH_OVERLAP_REFUSAL
    assert "enable_dbo" in VLLM_ARGS["engine_args"]
    assert "ubatch_size" in VLLM_ARGS["engine_args"]


def test_every_eplb_pin_has_its_reason() -> None:
    assert set(EPLB_CONFIG_REASONS) == set(EPLB_CONFIG_ON_EFA)
    assert all(reason.strip() for reason in EPLB_CONFIG_REASONS.values())
    assert "eplb_config" in VLLM_ARGS["engine_args"]


def _worker_env() -> dict[str, str]:
    manifest = yaml.safe_load((ROOT / "manifests" / "rayservice.yaml").read_text())
    env: dict[str, str] = {}
    for group in manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]:
        for container in group["template"]["spec"]["containers"]:
            env |= {e["name"]: e.get("value") for e in container.get("env", [])}
    return env


def test_nccl_settings_leave_libfabric_to_the_worker_manifest() -> None:
    """aws-ofi-nccl opens libfabric's EFA provider as FI_PROVIDER says; the worker manifest sets
    the FI_ variables once, and the NCCL settings neither repeat nor contradict them."""
    worker_env = _worker_env()
    assert worker_env["FI_PROVIDER"] == "efa"
    assert all(name.startswith("NCCL_") for name in NCCL_ON_EFA_ENV)
    for name, value in NCCL_ON_EFA_ENV.items():
        assert worker_env.get(name, value) == value


def _docs_table() -> dict[str, str]:
    """Backend -> the docs' verdict, from docs/architecture.md's "Expert parallel on EFA" table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Expert parallel on EFA", 1)[1].split("\n## ", 1)[0]
    verdicts = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1] in ("yes", "no"):
            for name in re.findall(r"`(\w+)`", cells[0]):
                verdicts[name] = cells[1]
    return verdicts


def test_the_architecture_page_tables_every_backend_with_the_catalogs_verdict() -> None:
    assert _docs_table() == {
        name: "yes" if reason is None else "no" for name, reason in ALL2ALL_BACKENDS.items()
    }
