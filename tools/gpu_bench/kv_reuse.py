"""`make gpu-bench-kv-reuse`: does the app's KV reuse hold on real engines? Prefill's routing
(Serve's power-of-two against the app's prefix-affinity router) and prefill's CPU offload tier,
on one GPU, with two prefill replicas and one decode replica of the Serve application as
synthesized, driven by `vllm bench serve`'s shared-prefix dataset.

    python -m tools.gpu_bench.kv_reuse prepare --variant NAME=CDK_OUT ... --model-config C
    python -m tools.gpu_bench.kv_reuse serve NAME      # (re)deploy one variant, wait RUNNING
    python -m tools.gpu_bench.kv_reuse wait NAME       # wait again (after a call's time limit)
    python -m tools.gpu_bench.kv_reuse sweep NAME      # every workload, counters around each
    python -m tools.gpu_bench.kv_reuse collect OUT
    python -m tools.gpu_bench.kv_reuse report docs/gpu-bench/kv-reuse/*.json

Why the run is shaped as it is. Routing decides the hit rate only when the sessions' prefixes
do not fit one replica's KV cache: power-of-two sends each prefix to either replica, so each
replica must hold every prefix; prefix affinity sends each prefix to one, so the two replicas
hold half each. A deployed p5 holds far more KV than fits beside two other engines on one GPU,
and serves far more sessions, so the run fixes each prefill replica's GPU cache at
``PREFILL_GPU_BLOCKS`` blocks (``num_gpu_blocks_override``, the same on any GPU) and sizes two
workloads against it (``regimes`` computes and the tests hold the relations):

* ``fit-two``: the prefixes fill more than one replica's cache and less than two: affinity
  should hit on (nearly) every prefix, power-of-two on about a cache's worth of them;
* ``exceed-two``: the prefixes fill more than both caches; without the offload tier a revisited
  prefix was evicted from GPU memory and is computed again, with it the prefix comes back from
  CPU memory (vLLM 0.26's OffloadingConnector, rendered by serving.prefill.kv_offload_gib_per_gpu).

Figures per variant and workload: `vllm bench serve`'s TTFT, ITL and throughput, and prefill's
own counters over the workload (vLLM's ``prefix_cache_*`` and ``external_prefix_cache_*``, read
from the Ray nodes' metrics ports as the scraper reads them) beside the router's prediction.
Each variant is a separate `cdk synth` (its `-c` overrides in ``VARIANTS``): what runs is the
synthesized Serve config, changed only where one GPU forces it, every change printed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app_config.node_labels import GPU_ROLES
from pdctl.verify import metric_totals
from tools.gpu_bench import hand_off, real_size, stack, word_tokenizer
from tools.gpu_bench.run_facts import JsonRecord, archive, point_figures
from tools.gpu_bench.workload import PERCENTILES, WARMUPS
from tools.gpu_check.deployed import DeployedRayService
from tools.gpu_check.machine import gpu_name, versions
from tools.gpu_check.one_gpu import Change, one_gpu_serve_config, served_model
from tools.gpu_check.serve_app import one_gpu_worker_resources

STATE = stack.STATE / "kv-reuse"
HTTP_PORT = stack.HTTP_PORT
ENVIRONMENT = {
    **stack.ENVIRONMENT,
    # Counters reach the nodes' metrics ports every report interval (Ray's default 10 s).
    "RAY_metrics_report_interval_ms": "2000",
}
METRICS_SETTLE_S = 5.0

PREFILL_REPLICAS = 2
PREFILL_GPU_BLOCKS = 192
# Three engines share the GPU; prefill's cache is fixed by PREFILL_GPU_BLOCKS, this share holds
# its weights, activations and those blocks (Qwen3-8B: 16.4 GB + 3.6 GB + activations).
MEMORY_SHARE = 0.3
# vLLM 0.26's OptimizationLevel.O0 (config/vllm.py): starts in about a minute instead of several.
STARTUP_OPTIMIZATION_LEVEL = 0
CONCURRENCY = 16
PREFIX_TOKENS = 1536
SUFFIX_TOKENS = 128
OUTPUT_TOKENS = 64
# The CPU tier the offload variant is synthesized with, per GPU (VARIANTS).
OFFLOAD_GIB_PER_GPU = 16

VARIANTS = {
    "power-of-two": (
        ("serving.prefill.request_router=power_of_two",),
        "prefill routed by Serve's power-of-two choices (the less loaded of two replicas)",
    ),
    "prefix-affinity": ((), "prefill routed by the app's PrefixAffinityRouter (the default)"),
    "prefix-affinity-offload": (
        (f"serving.prefill.kv_offload_gib_per_gpu={OFFLOAD_GIB_PER_GPU}",),
        f"the default router and prefill's CPU offload tier, {OFFLOAD_GIB_PER_GPU} GiB per GPU",
    ),
}


@dataclass(frozen=True)
class Sessions:
    """A shared-prefix workload: ``prefixes`` sessions, each request one session's prefix and
    its own suffix, in a random order (vLLM 0.26's prefix_repetition dataset shuffles)."""

    name: str
    prefixes: int
    prompts: int
    seed: int  # its own: the same seed would draw the other workload's prefixes again

    @property
    def description(self) -> str:
        return (
            f"{self.prefixes} sessions of a {PREFIX_TOKENS}-token prefix, each request its own "
            f"{SUFFIX_TOKENS}-token suffix, {OUTPUT_TOKENS} out; {self.prompts} requests at "
            f"{CONCURRENCY} streams"
        )

    def bench_args(self, base_url: str, model: str, tokenizer: str, out: Path) -> list[str]:
        return [
            "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", "prefix_repetition",
            "--prefix-repetition-prefix-len", str(PREFIX_TOKENS),
            "--prefix-repetition-suffix-len", str(SUFFIX_TOKENS),
            "--prefix-repetition-num-prefixes", str(self.prefixes),
            "--prefix-repetition-output-len", str(OUTPUT_TOKENS),
            "--ignore-eos", "--max-concurrency", str(CONCURRENCY),
            "--num-prompts", str(self.prompts), "--num-warmups", str(WARMUPS),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", PERCENTILES,
            "--disable-tqdm", "--save-result", "--result-dir", str(out.parent),
            "--result-filename", out.name, "--seed", str(self.seed),
        ]  # fmt: skip


WORKLOADS = (
    Sessions("fit-two", prefixes=24, prompts=384, seed=20261206),
    Sessions("exceed-two", prefixes=72, prompts=288, seed=20261207),
)


def blocks(tokens: int, block_size: int) -> int:
    return math.ceil(tokens / block_size)


def regimes(block_size: int, block_bytes: int) -> dict[str, dict[str, float]]:
    """Each workload's prefixes in prefill GPU caches (one replica's, ``PREFILL_GPU_BLOCKS``)
    and, for the offload variant, in one replica's CPU tier: what the run is shaped to show."""
    cpu_blocks = OFFLOAD_GIB_PER_GPU * 2**30 // block_bytes
    found = {}
    for workload in WORKLOADS:
        prefix_blocks = workload.prefixes * blocks(PREFIX_TOKENS, block_size)
        found[workload.name] = {
            "prefix blocks / one replica's GPU cache": prefix_blocks / PREFILL_GPU_BLOCKS,
            "prefix blocks / both replicas' GPU caches": prefix_blocks
            / (PREFILL_REPLICAS * PREFILL_GPU_BLOCKS),
            "one replica's share of the prefix blocks / its CPU tier": prefix_blocks
            / PREFILL_REPLICAS
            / cpu_blocks,
        }
    return found


def kv_bytes_per_token(config: Mapping[str, Any]) -> int:
    """bf16 K and V of every layer: the size a block of this model has in either tier."""
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return 2 * 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim


def kv_reuse_serve_config(
    deployed: Mapping[str, Any], model_path: str
) -> tuple[dict[str, Any], list[str]]:
    """The synthesized Serve config for this run: `make gpu-check`'s one-GPU changes, dummy
    weights, two prefill replicas with their cache fixed, three engines' memory shares."""
    config, changes = one_gpu_serve_config(deployed, model_path, efa=False, http_port=HTTP_PORT)
    (application,) = config["applications"]
    (deployed_application,) = deployed["applications"]
    ours: list[Change] = []
    for role in GPU_ROLES:
        kwargs = application["args"][f"{role}_config"]["engine_kwargs"]
        setting = f"{role}_config.engine_kwargs.gpu_memory_utilization"
        kwargs["gpu_memory_utilization"] = MEMORY_SHARE
        ours.append(
            Change(
                setting,
                deployed_application["args"][f"{role}_config"]["engine_kwargs"].get(
                    "gpu_memory_utilization"
                ),
                MEMORY_SHARE,
                f"three engines share one GPU ({PREFILL_REPLICAS} prefill, 1 decode)",
            )
        )
        kwargs["optimization_level"] = STARTUP_OPTIMIZATION_LEVEL
        ours.append(
            Change(
                f"{role}_config.engine_kwargs.optimization_level",
                None,
                STARTUP_OPTIMIZATION_LEVEL,
                "vLLM's -O0 (no torch.compile, no CUDA graphs): nine engine starts fit one "
                "30-minute GPU lease; every variant runs the same kernels",
            )
        )
    prefill = application["args"]["prefill_config"]
    prefill["engine_kwargs"]["num_gpu_blocks_override"] = PREFILL_GPU_BLOCKS
    ours.append(
        Change(
            "prefill_config.engine_kwargs.num_gpu_blocks_override",
            None,
            PREFILL_GPU_BLOCKS,
            "each prefill replica's GPU KV cache fixed (on any GPU) so that the sessions' "
            "prefixes exceed one replica's cache: where routing decides the hit rate",
        )
    )
    autoscaling = prefill["deployment_config"]["autoscaling_config"]
    for key in ("min_replicas", "max_replicas", "initial_replicas"):
        if key in autoscaling:
            autoscaling[key] = PREFILL_REPLICAS
            ours.append(
                Change(
                    f"prefill_config.deployment_config.autoscaling_config.{key}",
                    deployed_application["args"]["prefill_config"]["deployment_config"][
                        "autoscaling_config"
                    ].get(key),
                    PREFILL_REPLICAS,
                    "two prefill replicas (each on a Ray node of its own): what routing chooses "
                    "between",
                )
            )
    replaced = {change.setting for change in ours}
    lines = [str(change) for change in changes if change.setting not in replaced]
    lines += [str(change) for change in ours]
    return config, lines + real_size.with_dummy_weights(config)


@dataclass(frozen=True)
class CacheCounts:
    """Prefill's prefix-cache counters summed over its replicas' Ray nodes: tokens asked for,
    tokens found in GPU memory, and tokens the KV connector supplied (the offload tier)."""

    queries: float = 0.0
    hits: float = 0.0
    external_queries: float = 0.0
    external_hits: float = 0.0

    @classmethod
    def read(cls, texts: list[str]) -> CacheCounts:
        values = metric_totals(
            texts,
            "prefix_cache_queries",
            "prefix_cache_hits",
            "external_prefix_cache_queries",
            "external_prefix_cache_hits",
        )
        return cls(*(value for value, _ in values))

    def __sub__(self, before: CacheCounts) -> CacheCounts:
        pairs = zip(asdict(self).values(), asdict(before).values(), strict=True)
        return CacheCounts(*(after - earlier for after, earlier in pairs))


def cache_figures(delta: CacheCounts) -> dict[str, float | None]:
    """Hit rates over one workload. vLLM counts external queries only for the GPU's misses
    (vllm/v1/core/sched/scheduler.py, v0.26.0), so the tokens not computed are both hits."""
    reused = delta.hits + delta.external_hits
    return {
        "prompt_tokens": delta.queries,
        "gpu_hit_rate": delta.hits / delta.queries if delta.queries else None,
        "offload_hit_rate": delta.external_hits / delta.queries if delta.queries else None,
        "reuse_rate": reused / delta.queries if delta.queries else None,
    }


PREFILL_TTFT = "ray_vllm_time_to_first_token_seconds"


def prefill_engine_ttft_ms(metrics: Path, variants: Iterable[str]) -> dict[str, float | None]:
    """Each variant's prefill engines' own time to first token (arrival to the one token prefill
    makes: queue, prefix-cache lookup, computation), the mean over its whole sweep, from the
    pages `sweep` saved. A Ray node keeps exporting the series of replicas that are gone, so a
    variant's are the ``ReplicaId``s its pages show that no earlier variant's pages did."""
    from prometheus_client.parser import text_string_to_metric_families

    seen: set[str] = set()
    found: dict[str, float | None] = {}
    for variant in variants:
        totals = {"_sum": 0.0, "_count": 0.0}
        replicas = set()
        for page in sorted(metrics.glob(f"{variant}-prefill-*.txt")):
            for family in text_string_to_metric_families(page.read_text()):
                for sample in family.samples:
                    suffix = sample.name.removeprefix(PREFILL_TTFT)
                    replica = sample.labels.get("ReplicaId", "")
                    if suffix in totals and replica not in seen:
                        totals[suffix] += sample.value
                        replicas.add(replica)
        seen |= replicas
        found[variant] = 1000 * totals["_sum"] / totals["_count"] if totals["_count"] else None
    return found


ROUTER_PROMPT_BLOCKS = "ray_pd_llm_router_prompt_blocks_total"
ROUTER_MATCHED_BLOCKS = "ray_pd_llm_router_matched_blocks_total"


def sample_sum(texts: Iterable[str], name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        sample.value
        for text in texts
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


@dataclass
class KvReuseRun(JsonRecord):
    date: str
    gpu: str
    model: str
    architecture: str
    versions: dict[str, str]
    commit: str = ""
    changes: dict[str, list[str]] = field(default_factory=dict)  # by variant
    model_changes: list[str] = field(default_factory=list)
    workloads: dict[str, str] = field(default_factory=dict)
    regimes: dict[str, dict[str, float]] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)
    startup: dict[str, Any] = field(default_factory=dict)
    points: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _figure(run: KvReuseRun, variant: str, workload: str, key: str) -> float | None:
    value = run.points.get(variant, {}).get(workload, {}).get(key)
    return value if isinstance(value, int | float) else None


def targets(run: KvReuseRun) -> dict[str, tuple[float | None, bool]]:
    """Issue 32's targets: prefill hit rate >= 80 % with two replicas on the shared-prefix
    workload (affinity, fit-two); TTFT p50 there at least 2x lower than power-of-two's; and,
    once prefixes were evicted from GPU memory (exceed-two), TTFT p50 at least 3x lower with
    the offload tier than without."""
    hit = _figure(run, "prefix-affinity", "fit-two", "reuse_rate")
    p2c = _figure(run, "power-of-two", "fit-two", "median_ttft_ms")
    affinity = _figure(run, "prefix-affinity", "fit-two", "median_ttft_ms")
    evicted = _figure(run, "prefix-affinity", "exceed-two", "median_ttft_ms")
    offload = _figure(run, "prefix-affinity-offload", "exceed-two", "median_ttft_ms")
    routing = p2c / affinity if p2c and affinity else None
    tier = evicted / offload if evicted and offload else None
    return {
        "prefill hit rate, prefix affinity, fit-two >= 0.80": (hit, hit is not None and hit >= 0.8),
        "TTFT p50 power-of-two / prefix affinity, fit-two >= 2": (
            routing,
            routing is not None and routing >= 2,
        ),
        "TTFT p50 without / with the offload tier, exceed-two >= 3": (
            tier,
            tier is not None and tier >= 3,
        ),
    }


def _number(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def markdown_report(runs: Iterable[tuple[KvReuseRun, Path | None]]) -> str:
    """The docs' table of each run; with its saved metrics folder, prefill engines' own TTFT."""
    parts = []
    for run, metrics in runs:
        versions_line = ", ".join(f"{name} {version}" for name, version in run.versions.items())
        lines = [
            f"**{run.date}, {run.gpu}: {run.architecture}, dummy weights**, served as "
            f"`{run.model}` ({versions_line}; commit {run.commit or 'unrecorded'}); "
            f"{PREFILL_REPLICAS} prefill replicas and 1 decode replica on the one GPU",
            "",
            "Workloads: " + "; ".join(f"*{name}*: {text}" for name, text in run.workloads.items()),
            "",
            "| variant | workload | prefill GPU hits | offload hits | router predicted | "
            "TTFT p50 / p99 (ms) | TPOT p50 (ms) | output tok/s | failed |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for variant in run.variants:
            for workload, f in run.points.get(variant, {}).items():
                lines.append(
                    f"| {variant} | {workload} | {_share(f.get('gpu_hit_rate'))} | "
                    f"{_share(f.get('offload_hit_rate'))} | "
                    f"{_share(f.get('router_predicted_hit_rate'))} | "
                    f"{_number(f.get('median_ttft_ms'))} / {_number(f.get('p99_ttft_ms'))} | "
                    f"{_number(f.get('median_tpot_ms'), 1)} | "
                    f"{_number(f.get('output_throughput'), 0)} | {f.get('failed', '-')} |"
                )
        lines += [
            "",
            "Targets: "
            + "; ".join(
                f"{name}: {_number(value, 2)} ({'held' if held else 'missed'})"
                if value is not None
                else f"{name}: not measured"
                for name, (value, held) in targets(run).items()
            ),
        ]
        if metrics is not None:
            engine = prefill_engine_ttft_ms(metrics, run.variants)
            lines += [
                "",
                "Prefill engines' own TTFT (vLLM's histogram: arrival to prefill's one token), "
                "mean over both workloads: "
                + ", ".join(f"{name} {_number(value)} ms" for name, value in engine.items()),
            ]
        if run.startup:
            lines += [
                "",
                "Start-up: " + ", ".join(f"{key} {value}" for key, value in run.startup.items()),
            ]
        lines += [f"- {note}" for note in run.notes]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _share(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


# The steps on the GPU machine.


def _plan() -> dict[str, Any]:
    return json.loads((STATE / "plan.json").read_text())


def _record() -> KvReuseRun:
    return KvReuseRun.read(STATE / "result.json")


def prepare(args: argparse.Namespace) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    config = json.loads(Path(args.model_config).read_text())
    tokenizer, model_changes = word_tokenizer.given_or_built(args.tokenizer, STATE)
    model_path = STATE / "model"
    model_changes += real_size.build(config, tokenizer, model_path)
    block_bytes = 0
    plans, changes, model_id = {}, {}, ""
    for entry in args.variant:
        name, _, cdk_out = entry.partition("=")
        deployed = DeployedRayService.read(Path(cdk_out))
        model_id, _ = served_model(deployed.serve_config)
        serve_config, lines = kv_reuse_serve_config(deployed.serve_config, str(model_path))
        resources, resource_changes = one_gpu_worker_resources(
            {role: deployed.worker_resources(role) for role in GPU_ROLES}
        )
        plans[name] = {
            "serve_config": serve_config,
            "head_start_params": deployed.head_start_params,
            "worker_resources": resources,
        }
        changes[name] = lines + resource_changes + hand_off.transport_changes(True)
        (application,) = serve_config["applications"]
        block_size = application["args"]["prefill_config"]["engine_kwargs"]["block_size"]
        block_bytes = block_size * kv_bytes_per_token(config)
    (STATE / "plan.json").write_text(json.dumps({"variants": plans, "model_id": model_id}))
    run = KvReuseRun(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        gpu=gpu_name(),
        model=model_id,
        architecture=f"{config['architectures'][0]} ({Path(args.model_config).name})",
        versions=versions(),
        commit=args.commit,
        changes=changes,
        model_changes=model_changes,
        workloads={workload.name: workload.description for workload in WORKLOADS},
        regimes=regimes(block_size, block_bytes),
        variants={name: VARIANTS[name][1] for name in plans},
    )
    run.write(STATE / "result.json")
    print(f"kv-reuse: {model_id} as {run.architecture} on {run.gpu}; {run.versions}")
    for name, lines in changes.items():
        for line in lines:
            print(f"  {name} change: {line}")
    print(f"  regimes: {json.dumps(run.regimes)}", flush=True)


def _environment() -> dict[str, str]:
    return {**ENVIRONMENT, **hand_off.transport_environment(True)}


def _node_environment() -> dict[str, dict[str, str]]:
    found = {}
    for role in GPU_ROLES:
        count = PREFILL_REPLICAS if role == "prefill" else 1
        for index, node in enumerate(stack.node_names(role, count)):
            found[node] = hand_off.side_channel_environment(role, index)
    return found


def serve(args: argparse.Namespace) -> None:
    """Deploy one variant: a fresh Ray on the first, else the running applications deleted
    first (a PUT over a running app would report its old RUNNING state for a moment)."""
    plan = _plan()["variants"][args.variant]
    start = time.monotonic()
    try:
        cluster = stack.cluster()
        stack.applications(cluster)
    except OSError:
        cluster = stack.start_ray(
            plan["head_start_params"],
            plan["worker_resources"],
            _environment(),
            STATE,
            _node_environment(),
            {"prefill": PREFILL_REPLICAS},
        )
    stack.replace_applications(cluster, plan["serve_config"])
    (application,) = plan["serve_config"]["applications"]
    seconds = cluster.wait_running(application["name"], STATE / f"serve-{args.variant}.json")
    run = _record()
    run.startup[f"{args.variant} RUNNING after (s)"] = round(time.monotonic() - start)
    run.write(STATE / "result.json")
    print(f"kv-reuse: {args.variant} RUNNING ({seconds:.0f} s of waiting)", flush=True)


def wait(args: argparse.Namespace) -> None:
    """Wait again for a variant a call's time limit cut short (nothing is redeployed)."""
    plan = _plan()["variants"][args.variant]
    (application,) = plan["serve_config"]["applications"]
    seconds = stack.cluster().wait_running(
        application["name"], STATE / f"serve-{args.variant}.json"
    )
    print(f"kv-reuse: {args.variant} RUNNING ({seconds:.0f} s more waiting)", flush=True)


def _prefill_pages() -> list[str]:
    pages = []
    for node in stack.node_names("prefill", PREFILL_REPLICAS):
        url = f"http://127.0.0.1:{stack.metrics_port(node)}/metrics"
        with urllib.request.urlopen(url, timeout=30) as answer:
            pages.append(answer.read().decode())
    return pages


def _decode_page() -> str:
    url = f"http://127.0.0.1:{stack.metrics_port('decode')}/metrics"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.read().decode()


def _router_blocks() -> tuple[float, float]:
    """The app router's prompt blocks routed to prefill and blocks it predicted cached; it runs
    in the decode replica, which calls prefill (serve_extensions/prefix_router.py)."""
    page = [_decode_page()]
    return sample_sum(page, ROUTER_PROMPT_BLOCKS), sample_sum(page, ROUTER_MATCHED_BLOCKS)


def sweep(args: argparse.Namespace) -> None:
    plan = _plan()
    model_path = str(STATE / "model")
    for workload in WORKLOADS:
        time.sleep(METRICS_SETTLE_S)
        before = CacheCounts.read(_prefill_pages())
        router_before = _router_blocks()
        out = STATE / "raw" / f"{args.variant}-{workload.name}.json"
        out.parent.mkdir(exist_ok=True)
        argv = workload.bench_args(
            f"http://127.0.0.1:{HTTP_PORT}", plan["model_id"], model_path, out
        )
        start = time.monotonic()
        with open(STATE / "bench.log", "ab") as log:
            subprocess.run(
                [sys.executable, "-m", "tools.gpu_bench.points", json.dumps([argv])],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        time.sleep(METRICS_SETTLE_S)
        delta = CacheCounts.read(_prefill_pages()) - before
        router = [
            now - earlier for now, earlier in zip(_router_blocks(), router_before, strict=True)
        ]
        figures = {**point_figures(out), **cache_figures(delta)}
        figures["router_predicted_hit_rate"] = router[1] / router[0] if router[0] else None
        run = _record()
        run.points.setdefault(args.variant, {})[workload.name] = figures
        run.write(STATE / "result.json")
        print(
            f"kv-reuse: {args.variant} {workload.name}: GPU hits {_share(figures['gpu_hit_rate'])}"
            f", offload {_share(figures['offload_hit_rate'])}, router "
            f"{_share(figures['router_predicted_hit_rate'])}; TTFT p50 "
            f"{_number(figures.get('median_ttft_ms'))} ms p99 {_number(figures.get('p99_ttft_ms'))}"
            f", {_number(figures.get('output_throughput'), 0)} tok/s, failed "
            f"{figures.get('failed')} ({time.monotonic() - start:.0f} s)",
            flush=True,
        )
    metrics = STATE / "metrics"
    metrics.mkdir(exist_ok=True)
    for index, page in enumerate(_prefill_pages()):
        (metrics / f"{args.variant}-prefill-{index + 1}.txt").write_text(page)
    (metrics / f"{args.variant}-decode.txt").write_text(_decode_page())


def collect(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kv-reuse.json").write_bytes((STATE / "result.json").read_bytes())
    logs = sorted(STATE.glob("*.log")) + sorted(STATE.glob("serve-*.json"))
    archive(out / "kv-reuse-logs.tar.gz", STATE, logs, ("metrics", "raw"))


def metrics_folder(result: Path) -> Path | None:
    """The metrics pages recorded beside a result: ``<result stem>-metrics/``."""
    folder = result.with_name(f"{result.stem}-metrics")
    return folder if folder.is_dir() else None


def report(args: argparse.Namespace) -> None:
    results = [Path(path) for path in args.results]
    print(markdown_report((KvReuseRun.read(path), metrics_folder(path)) for path in results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_bench.kv_reuse", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("--variant", action="append", required=True, help="NAME=CDK_OUT")
    p.add_argument("--model-config", required=True)
    p.add_argument("--tokenizer", help="folder with tokenizer.json (default: word_tokenizer)")
    p.add_argument("--commit", default="")
    p.set_defaults(handler=prepare)
    for name, handler in (("serve", serve), ("wait", wait), ("sweep", sweep)):
        command = commands.add_parser(name)
        command.add_argument("variant", choices=tuple(VARIANTS))
        command.set_defaults(handler=handler)
    c = commands.add_parser("collect")
    c.add_argument("out")
    c.set_defaults(handler=collect)
    r = commands.add_parser("report")
    r.add_argument("results", nargs="+")
    r.set_defaults(handler=report)
    args = parser.parse_args(argv)
    args.handler(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
