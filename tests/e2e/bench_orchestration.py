"""`make e2e-bench`: the latency the P/D graph adds over Ray's aggregated application.

Two applications on one local Ray, side by side: the synthesized P/D application
(``build_pd_openai_app``: ingress -> decode server -> prefill, then decode's stream), and Ray's
aggregated ``build_openai_app`` with one LLM config, the prefill config without its
``kv_transfer_config`` (ingress -> engine), on a node of its own shaped like a prefill pod. The
stand-in engine costs nothing (``STANDIN_TOKEN_DELAY_S=0``: no token time, no transfer time,
no request record), so what is measured is Ray Serve's and Ray Serve LLM's own path. At each
concurrency both are run alternately, several rounds, so drift on a shared machine hits both.

Figures: time to first token (request sent -> first content chunk) and time per output token
(the rest of the stream over the remaining tokens), p50 and p99 over all requests of a setting,
requests/s, and the ratios `make gpu-bench` reports for deployed against its floor (here the
aggregated app, the same Serve path without the P/D hop): P/D / aggregated output tokens/s and
the TTFT p50 P/D adds. With a stand-in that costs nothing the engines never saturate, so the
highest concurrency whose requests/s still grows is the ceiling of Serve's own path (the
ingress replica and the hops), reported as ``ceiling``. Written to
<run dir>/bench-orchestration.json and printed as a table.

``--intervals MS ...`` measures Ray Serve LLM's stream batching instead: the P/D application at
Ray's default interval (decode's ``experimental_configs`` without ``stream_batching_interval_ms``:
MODEL_RESPONSE_BATCH_TIMEOUT_MS, 50 ms in Ray 2.58) against the same application at each given
interval, each a Serve application of its own (route prefix ``/pd-<ms>ms``) on nodes of its own
(one per side, shaped like the side's pod), run alternately as above. Only decode's interval is
set: it is the one the P/D path uses (LLMServer._run_request batches a streamed response;
prefill's request is clamped to one non-streamed token, and the ingress relays what decode
yields; docs/operating.md, "Stream batching"). ``--token-delay-s`` gives the stand-in a time per
output token (0.005: decode's ITL p50 on one H200 with Qwen3-8B, docs/verification.md), so that
a batch window holds a few tokens rather than the whole answer. Each setting adds ``gap`` (the
time between consecutive content chunks, pooled over all requests: vllm bench serve's ITL),
where batching shows as bundles. ``--report FILE`` prints the table of a written result.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from harness import PROJECT_ROOT, LocalRay, NodeShape, Synthesized

CONCURRENCY = (1, 8, 64)
# A step up in streams that raises requests/s by less than this share: the path has bent.
BEND = 0.10
OUTPUT_TOKENS = 32
AGGREGATED = "aggregated"
PD = "pd"
REQUEST_TIMEOUT_S = 120.0
# Ray Serve LLM 2.58 reads it from decode's LLMConfig.experimental_configs
# (ray/llm/_internal/serve/core/server/llm_server.py LLMServer._get_batch_interval_ms).
INTERVAL_KEY = "stream_batching_interval_ms"


def aggregated_app(pd_app: dict[str, Any], node_resource: str) -> dict[str, Any]:
    """Ray's aggregated application for the same model: the prefill config without the KV
    connector; its bundles ask for the extra node's resource instead of the prefill pods'."""
    llm = copy.deepcopy(pd_app["args"]["prefill_config"])
    llm["engine_kwargs"].pop("kv_transfer_config", None)
    bundle = llm["placement_group_config"]["bundle_per_worker"]
    bundle.pop("prefill", None)
    bundle[node_resource] = 1
    return {
        "name": AGGREGATED,
        "route_prefix": f"/{AGGREGATED}",
        "import_path": "ray.serve.llm:build_openai_app",
        "args": {"llm_configs": [llm]},
    }


def interval_name(interval_ms: float) -> str:
    return f"{PD}-{interval_ms:g}ms"


def at_rays_default(pd_app: dict[str, Any]) -> dict[str, Any]:
    """The P/D application with Ray's own stream batching interval: no interval on either side."""
    app = copy.deepcopy(pd_app)
    for side in ("prefill_config", "decode_config"):
        llm = app["args"][side]
        llm.get("experimental_configs", {}).pop(INTERVAL_KEY, None)
        if llm.get("experimental_configs") == {}:
            del llm["experimental_configs"]
    return app


def interval_app(pd_app: dict[str, Any], interval_ms: float, node_resource: str) -> dict[str, Any]:
    """The same P/D application at another decode stream batching interval, as an application of
    its own: its name and route prefix, and bundles that ask for its extra nodes' resources
    (``<side>-<node_resource>``) instead of the RayService pods'."""
    app = at_rays_default(pd_app)
    name = interval_name(interval_ms)
    app["name"], app["route_prefix"] = name, f"/{name}"
    for role in ("prefill", "decode"):
        llm = app["args"][f"{role}_config"]
        bundle = llm["placement_group_config"]["bundle_per_worker"]
        bundle.pop(role, None)
        bundle[f"{role}-{node_resource}"] = 1
    app["args"]["decode_config"].setdefault("experimental_configs", {})[INTERVAL_KEY] = interval_ms
    return app


Measured = tuple[float, float, list[float]]


async def one_stream(session: aiohttp.ClientSession, url: str, model: str) -> Measured | None:
    """(TTFT, time per output token, gaps between consecutive content chunks) of one streamed
    completion; None when it failed. A chunk is timed when its line arrives: the chunks of one
    batch arrive together, their gaps near zero."""
    body = {"model": model, "prompt": "bench", "max_tokens": OUTPUT_TOKENS, "stream": True}
    start = time.perf_counter()
    first, last, tokens = None, None, 0
    gaps: list[float] = []
    async with session.post(url, json=body) as response:
        if response.status != 200:
            return None
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("data: {") and '"text":"' in line and '"text":""' not in line:
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now
                first = first or last
                tokens += 1
    if first is None or last is None or tokens < 2:
        return None
    return first - start, (last - first) / (tokens - 1), gaps


async def run(url: str, model: str, concurrency: int, requests: int) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=concurrency)
    results: list[Measured | None] = []
    queue = list(range(requests))

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            queue.pop()
            try:
                results.append(await one_stream(session, url, model))
            except (aiohttp.ClientError, TimeoutError):
                results.append(None)

    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        duration = time.perf_counter() - start
    done = [result for result in results if result is not None]
    return {
        "ttft": [ttft for ttft, _, _ in done],
        "tpot": [tpot for _, tpot, _ in done],
        "gap": [gap for _, _, gaps in done for gap in gaps],
        "failed": len(results) - len(done),
        "duration_s": duration,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 50) * 1000, 2),
        "p99_ms": round(percentile(values, 99) * 1000, 2),
        "mean_ms": round(statistics.fmean(values) * 1000, 2),
    }


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory_kb / 2**20, 1),
        "python": platform.python_version(),
        "load_average_before": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cdk-out", type=Path, default=PROJECT_ROOT / "cdk.out")
    parser.add_argument("--run-dir", type=Path, default=PROJECT_ROOT / "build" / "e2e-bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests-per-stream", type=int, default=8)
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument(
        "--intervals",
        type=float,
        nargs="+",
        default=[],
        help="decode stream batching intervals (ms) to measure against Ray's default, "
        "instead of P/D against the aggregated app",
    )
    parser.add_argument(
        "--token-delay-s", type=float, default=0.0, help="the stand-in's time per output token"
    )
    parser.add_argument("--report", type=Path, help="print the table of a written result")
    args = parser.parse_args()
    if args.report:
        print(table(json.loads(args.report.read_text())))
        return
    if any(interval < 0 for interval in args.intervals):
        parser.error("--intervals: Ray Serve LLM's Batcher needs an interval >= 0")

    synthesized = Synthesized.read(args.cdk_out)
    prefill_pod = next(p for p in synthesized.worker_pods() if p.group == "prefill")
    decode_pod = next(p for p in synthesized.worker_pods() if p.group == "decode")
    if args.intervals:
        # Per interval one node per side, shaped like the side's pod: a replica's bundles
        # take a node's GPUs and half its CPUs, so two replicas do not fit one node.
        extras = [
            NodeShape(
                f"{pod.group}-{interval_name(interval)}",
                pod.gpus,
                {f"{pod.group}-{interval_name(interval)}": float(pod.gpus)},
                pod.accelerator,
            )
            for interval in args.intervals
            for pod in (prefill_pod, decode_pod)
        ]
    else:
        extras = [NodeShape(AGGREGATED, prefill_pod.gpus, {AGGREGATED: float(prefill_pod.gpus)},
                            prefill_pod.accelerator)]  # fmt: skip
    cluster = LocalRay(
        synthesized,
        args.run_dir,
        extra_nodes=extras,
        extra_env={"STANDIN_TOKEN_DELAY_S": str(args.token_delay_s), "STANDIN_RECORDS": ""},
    )
    result: dict[str, Any] = {
        "machine": machine(),
        "output_tokens": OUTPUT_TOKENS,
        "token_delay_s": args.token_delay_s,
        "rounds": args.rounds,
        "requests_per_stream": args.requests_per_stream,
        "runs": {},
    }
    try:
        cluster.start()
        config = copy.deepcopy(cluster.config)
        synthesized_app = config["applications"][0]
        if args.intervals:
            config["applications"] = [at_rays_default(synthesized_app)] + [
                interval_app(synthesized_app, interval, interval_name(interval))
                for interval in args.intervals
            ]
            apps = {PD: None} | {interval_name(i): i for i in args.intervals}
            result["baseline"] = PD
        else:
            config["applications"].append(aggregated_app(synthesized_app, AGGREGATED))
            decode_configs = synthesized_app["args"]["decode_config"].get("experimental_configs")
            apps = {PD: (decode_configs or {}).get(INTERVAL_KEY), AGGREGATED: None}
            result["baseline"] = AGGREGATED
        from ray.llm._internal.serve.constants import MODEL_RESPONSE_BATCH_TIMEOUT_MS

        result["rays_default_interval_ms"] = MODEL_RESPONSE_BATCH_TIMEOUT_MS
        result["stream_batching_interval_ms"] = apps
        cluster.deploy(config)
        model = synthesized_app["args"]["decode_config"]["model_loading_config"]["model_id"]
        urls = {
            app: f"{cluster.base_url}/v1/completions"
            if app == PD
            else f"{cluster.base_url}/{app}/v1/completions"
            for app in apps
        }
        for url in urls.values():  # warm every path
            asyncio.run(run(url, model, 4, 16))
        for concurrency in args.concurrency:
            pooled: dict[str, dict[str, list[float]]] = {
                app: {"ttft": [], "tpot": [], "gap": []} for app in urls
            }
            failed = dict.fromkeys(urls, 0)
            busy = dict.fromkeys(urls, 0.0)
            for _ in range(args.rounds):
                for app, url in urls.items():
                    requests = concurrency * args.requests_per_stream
                    measured = asyncio.run(run(url, model, concurrency, requests))
                    for figure in pooled[app]:
                        pooled[app][figure] += measured[figure]
                    failed[app] += measured["failed"]
                    busy[app] += measured["duration_s"]
            runs = {
                app: {
                    "requests": len(pooled[app]["ttft"]),
                    "failed": failed[app],
                    "ttft": summary(pooled[app]["ttft"]),
                    "tpot": summary(pooled[app]["tpot"]),
                    "gap": summary(pooled[app]["gap"]),
                    "requests_per_s": round(len(pooled[app]["ttft"]) / busy[app], 1),
                }
                for app in urls
            }
            runs["ratios"] = {
                app: ratios(runs, app, result["baseline"])
                for app in urls
                if app != result["baseline"]
            }
            result["runs"][str(concurrency)] = runs
            print(
                f"concurrency {concurrency}: done, load {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
                flush=True,
            )
        result["ceiling"] = {app: ceiling(result["runs"], app) for app in urls}
    finally:
        cluster.stop()
    result["machine"]["load_average_after"] = os.getloadavg()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    (args.run_dir / "bench-orchestration.json").write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


def ratios(runs: dict[str, Any], app: str, baseline: str) -> dict[str, float]:
    """One application against the baseline at one concurrency, as gpu-bench reads deployed
    against direct: output tokens/s (requests/s x the fixed output length) and the TTFT p50
    added."""
    measured, base = runs[app], runs[baseline]
    return {
        "tokens_per_s": round(measured["requests_per_s"] / base["requests_per_s"], 3)
        if base["requests_per_s"]
        else 0.0,
        "ttft_p50_added_ms": round(measured["ttft"]["p50_ms"] - base["ttft"]["p50_ms"], 2),
    }


def ceiling(runs: dict[str, Any], app: str) -> dict[str, Any]:
    """The highest concurrency before requests/s stops growing (by less than BEND per step),
    with its requests/s and output tokens/s; the last one measured if it never bends."""
    points = sorted((int(c), figures[app]["requests_per_s"]) for c, figures in runs.items())
    best = points[0]
    for previous, current in itertools.pairwise(points):
        if current[1] < previous[1] * (1 + BEND):
            best = previous
            break
        best = current
    return {
        "streams": best[0],
        "requests_per_s": best[1],
        "output_tokens_per_s": round(best[1] * OUTPUT_TOKENS, 1),
        "bent": best != points[-1],
    }


def table(result: dict[str, Any]) -> str:
    """Markdown, one row per concurrency and application, in milliseconds; each application
    but the baseline with its difference from the baseline and its share of its output
    tokens/s. A result written before the gap and the baseline were recorded reads as P/D
    against the aggregated app."""
    baseline = result.get("baseline", AGGREGATED)
    intervals = result.get("stream_batching_interval_ms", {})
    default = result.get("rays_default_interval_ms")

    def label(app: str) -> str:
        interval = intervals.get(app)
        if app == AGGREGATED or (interval is None and default is None):
            return app
        return f"{app} ({interval if interval is not None else default:g} ms)"

    def cell(runs: dict[str, Any], app: str, figure: str, quantile: str) -> str:
        if figure not in runs[app]:
            return ""
        value = runs[app][figure][quantile]
        if app == baseline:
            return f"{value:.1f}"
        return f"{value:.1f} ({value - runs[baseline][figure][quantile]:+.1f})"

    figures = [(f, q) for f in ("ttft", "tpot", "gap") for q in ("p50_ms", "p99_ms")]
    lines = [
        "| streams | application (interval) | TTFT p50 | TTFT p99 | per token p50 "
        "| per token p99 | gap p50 | gap p99 | requests/s | tok/s vs baseline |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for concurrency, runs in result["runs"].items():
        for app in [a for a in runs if a != "ratios"]:
            cells = [cell(runs, app, figure, quantile) for figure, quantile in figures]
            share = "" if app == baseline else f"{ratios(runs, app, baseline)['tokens_per_s']:.2f}"
            lines.append(
                f"| {concurrency} | {label(app)} | "
                + " | ".join(cells)
                + f" | {runs[app]['requests_per_s']:.0f} | {share} |"
            )
    # One concurrency has no step to bend at.
    ceilings = result.get("ceiling", {}) if len(result["runs"]) > 1 else {}
    for app, found in ceilings.items():
        verb = "bends after" if found["bent"] else "still grows at"
        lines.append(
            f"\n{label(app)}: requests/s {verb} {found['streams']} streams "
            f"({found['requests_per_s']:.0f} requests/s, "
            f"{found['output_tokens_per_s']:.0f} output tokens/s)"
        )
    m = result["machine"]
    before = ", ".join(f"{value:.1f}" for value in m["load_average_before"])
    after = ", ".join(f"{value:.1f}" for value in m.get("load_average_after", ()))
    delay = result.get("token_delay_s", 0.0)
    lines.append(
        f"\n{m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, load {before} before"
        + (f", {after} after" if after else "")
        + f"; stand-in {delay * 1000:g} ms per token, {result['output_tokens']} tokens"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
