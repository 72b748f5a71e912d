"""The KV-reuse benchmark without a GPU: each variant is the configuration it names, the run's
changes to the synthesized config are exactly the ones it prints, the workloads sit in the cache
regimes the run is shaped for, prefill's counters become hit rates, and the targets read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from serving_manifests.serve_config import MULTI_CONNECTOR, render_serve_config
from tests.configurations import settings_for
from tools.gpu_bench import kv_reuse
from tools.gpu_bench.kv_reuse import (
    PREFILL_GPU_BLOCKS,
    PREFILL_REPLICAS,
    VARIANTS,
    WORKLOADS,
    CacheCounts,
    KvReuseRun,
    cache_figures,
    kv_bytes_per_token,
    kv_reuse_serve_config,
    markdown_report,
    regimes,
    targets,
)

ROOT = Path(__file__).resolve().parents[2]
QWEN3_8B = json.loads((ROOT / "catalog/model_configs/Qwen3-8B.json").read_text())
RESULTS = sorted((ROOT / "docs" / "gpu-bench" / "kv-reuse").glob("*.json"))


def _variant_config(name: str) -> dict:
    overrides = dict(override.split("=", 1) for override in VARIANTS[name][0])
    return render_serve_config(settings_for("default", **overrides))


def _prefill(config: dict) -> dict:
    return config["applications"][0]["args"]["prefill_config"]


def test_each_variant_is_the_configuration_it_names() -> None:
    routers = {
        name: _prefill(_variant_config(name))["deployment_config"]["request_router_config"][
            "request_router_class"
        ]
        for name in VARIANTS
    }
    assert routers["power-of-two"].endswith(":PowerOfTwoChoicesRequestRouter")
    assert routers["prefix-affinity"] == "serve_extensions.prefix_router:PrefixAffinityRouter"
    assert routers["prefix-affinity-offload"] == routers["prefix-affinity"]
    connectors = {
        name: _prefill(_variant_config(name))["engine_kwargs"]["kv_transfer_config"]["kv_connector"]
        for name in VARIANTS
    }
    assert connectors["prefix-affinity-offload"] == MULTI_CONNECTOR
    assert connectors["power-of-two"] == connectors["prefix-affinity"] != MULTI_CONNECTOR


def test_the_run_changes_replicas_cache_and_memory_and_prints_each_change_once() -> None:
    deployed = _variant_config("prefix-affinity")
    config, lines = kv_reuse_serve_config(deployed, "/model")
    prefill = _prefill(config)
    decode = config["applications"][0]["args"]["decode_config"]
    assert prefill["deployment_config"]["autoscaling_config"]["max_replicas"] == PREFILL_REPLICAS
    assert prefill["deployment_config"]["autoscaling_config"]["min_replicas"] == PREFILL_REPLICAS
    assert decode["deployment_config"]["autoscaling_config"]["max_replicas"] == 1
    assert prefill["engine_kwargs"]["num_gpu_blocks_override"] == PREFILL_GPU_BLOCKS
    assert "num_gpu_blocks_override" not in decode["engine_kwargs"]
    shares = [side["engine_kwargs"]["gpu_memory_utilization"] for side in (prefill, decode)]
    assert PREFILL_REPLICAS * shares[0] + shares[1] <= 0.95
    assert (
        prefill["deployment_config"]["request_router_config"]
        == _prefill(deployed)["deployment_config"]["request_router_config"]
    )
    settings = [line.split(":")[0] for line in lines]
    assert len(settings) == len(set(settings)), lines
    for changed in (
        "prefill_config.engine_kwargs.num_gpu_blocks_override",
        "prefill_config.deployment_config.autoscaling_config.max_replicas",
        "prefill_config.engine_kwargs.gpu_memory_utilization",
        "decode_config.engine_kwargs.gpu_memory_utilization",
        "prefill_config.engine_kwargs.load_format",
        "decode_config.engine_kwargs.optimization_level",
    ):
        assert changed in settings, changed


def test_every_request_fits_the_engines_context() -> None:
    config, _ = kv_reuse_serve_config(_variant_config("prefix-affinity"), "/model")
    longest = kv_reuse.PREFIX_TOKENS + kv_reuse.SUFFIX_TOKENS + kv_reuse.OUTPUT_TOKENS
    assert longest <= _prefill(config)["engine_kwargs"]["max_model_len"]


def test_the_workloads_sit_in_the_regimes_the_run_compares() -> None:
    """fit-two: more than one replica's cache, less than both (routing decides); exceed-two:
    more than both (prefixes are evicted), within one replica's CPU tier (the tier holds them)."""
    block_size = _prefill(_variant_config("prefix-affinity"))["engine_kwargs"]["block_size"]
    found = regimes(block_size, block_size * kv_bytes_per_token(QWEN3_8B))
    fit, exceed = found["fit-two"], found["exceed-two"]
    assert fit["prefix blocks / one replica's GPU cache"] > 1.2
    assert fit["prefix blocks / both replicas' GPU caches"] < 0.9
    assert exceed["prefix blocks / both replicas' GPU caches"] > 1.5
    assert exceed["one replica's share of the prefix blocks / its CPU tier"] < 0.9
    assert [workload.name for workload in WORKLOADS] == ["fit-two", "exceed-two"]
    assert len({workload.seed for workload in WORKLOADS}) == len(WORKLOADS)


def test_a_block_of_qwen3_8b_is_its_layers_k_and_v_in_bf16() -> None:
    # 36 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes (docs/verification.md: 147,456 B)
    assert kv_bytes_per_token(QWEN3_8B) == 147_456


def _page(values: dict[str, float]) -> str:
    """A metrics page as Ray exports vLLM's counters: ray_ prefix, _total suffix."""
    registry = CollectorRegistry()
    for name, value in values.items():
        Counter(f"ray_vllm_{name}", name, ["ReplicaId"], registry=registry).labels("r").inc(value)
    return generate_latest(registry).decode()


def test_hit_rates_are_prefills_counters_over_the_workload_summed_over_replicas() -> None:
    before = CacheCounts.read([_page({"prefix_cache_queries": 100, "prefix_cache_hits": 50})])
    after = CacheCounts.read(
        [
            _page({"prefix_cache_queries": 1100, "prefix_cache_hits": 650}),
            _page(
                {
                    "prefix_cache_queries": 1000,
                    "prefix_cache_hits": 200,
                    "external_prefix_cache_queries": 800,
                    "external_prefix_cache_hits": 600,
                }
            ),
        ]
    )
    figures = cache_figures(after - before)
    assert figures["prompt_tokens"] == 2000
    assert figures["gpu_hit_rate"] == pytest.approx(800 / 2000)
    assert figures["offload_hit_rate"] == pytest.approx(600 / 2000)
    assert figures["reuse_rate"] == pytest.approx(1400 / 2000)


def test_no_prompt_tokens_gives_no_rate_rather_than_zero() -> None:
    assert cache_figures(CacheCounts())["gpu_hit_rate"] is None


def _run(points: dict) -> KvReuseRun:
    variants = dict.fromkeys(VARIANTS, "")
    return KvReuseRun(
        date="d",
        gpu="g",
        model="m",
        architecture="a",
        versions={},
        variants=variants,
        points=points,
    )


def _point(reuse: float, ttft: float) -> dict:
    return {"reuse_rate": reuse, "median_ttft_ms": ttft}


@pytest.mark.parametrize(
    ("points", "verdicts"),
    [
        (
            {
                "power-of-two": {"fit-two": _point(0.5, 200)},
                "prefix-affinity": {"fit-two": _point(0.9, 90), "exceed-two": _point(0.4, 300)},
                "prefix-affinity-offload": {"exceed-two": _point(0.9, 90)},
            },
            (True, True, True),
        ),
        (
            {
                "power-of-two": {"fit-two": _point(0.5, 150)},
                "prefix-affinity": {"fit-two": _point(0.79, 90), "exceed-two": _point(0.4, 200)},
                "prefix-affinity-offload": {"exceed-two": _point(0.9, 90)},
            },
            (False, False, False),
        ),
        ({}, (False, False, False)),
    ],
)
def test_the_targets_read_the_variants_side_by_side(points, verdicts) -> None:
    assert tuple(held for _, held in targets(_run(points)).values()) == verdicts


def _ttft_page(replicas: dict[str, tuple[float, float]]) -> str:
    """Ray's export of vLLM's TTFT histogram: one series per replica (sum, count)."""
    return "".join(
        f'ray_vllm_time_to_first_token_seconds_{key}{{ReplicaId="{replica}"}} {value}\n'
        for replica, (total, count) in replicas.items()
        for key, value in (("sum", total), ("count", count))
    )


def test_a_variants_engine_ttft_leaves_out_the_series_of_earlier_variants_replicas(
    tmp_path,
) -> None:
    (tmp_path / "a-prefill-1.txt").write_text(_ttft_page({"r1": (3.0, 20)}))
    (tmp_path / "a-prefill-2.txt").write_text(_ttft_page({"r2": (1.0, 20)}))
    # Ray still exports a's replicas on the nodes that then host b's.
    (tmp_path / "b-prefill-1.txt").write_text(_ttft_page({"r1": (3.0, 20), "r3": (0.5, 10)}))
    (tmp_path / "b-prefill-2.txt").write_text(_ttft_page({"r2": (1.0, 20), "r4": (1.5, 10)}))
    found = kv_reuse.prefill_engine_ttft_ms(tmp_path, ["a", "b", "c"])
    assert found["a"] == pytest.approx(1000 * 4.0 / 40)
    assert found["b"] == pytest.approx(1000 * 2.0 / 20)
    assert found["c"] is None


def test_the_recorded_runs_have_their_metrics_beside_them() -> None:
    for path in RESULTS:
        folder = kv_reuse.metrics_folder(path)
        assert folder is not None, path
        run = KvReuseRun.read(path)
        assert all(
            value for value in kv_reuse.prefill_engine_ttft_ms(folder, run.variants).values()
        )


def test_the_docs_table_is_generated_from_the_recorded_runs() -> None:
    assert RESULTS, "no recorded run in docs/gpu-bench/kv-reuse/"
    page = (ROOT / "docs" / "verification.md").read_text()
    runs = ((KvReuseRun.read(path), kv_reuse.metrics_folder(path)) for path in RESULTS)
    assert markdown_report(runs) in page
