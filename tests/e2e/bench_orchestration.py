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
REQUEST_TIMEOUT_S = 120.0


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


async def one_stream(
    session: aiohttp.ClientSession, url: str, model: str
) -> tuple[float, float] | None:
    """(TTFT, time per output token) of one streamed completion; None when it failed."""
    body = {"model": model, "prompt": "bench", "max_tokens": OUTPUT_TOKENS, "stream": True}
    start = time.perf_counter()
    first, last, tokens = None, None, 0
    async with session.post(url, json=body) as response:
        if response.status != 200:
            return None
        async for raw in response.content:
            line = raw.decode().strip()
            if line.startswith("data: {") and '"text":"' in line and '"text":""' not in line:
                last = time.perf_counter()
                first = first or last
                tokens += 1
    if first is None or last is None or tokens < 2:
        return None
    return first - start, (last - first) / (tokens - 1)


async def run(url: str, model: str, concurrency: int, requests: int) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=concurrency)
    results: list[tuple[float, float] | None] = []
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
        "ttft": [ttft for ttft, _ in done],
        "tpot": [tpot for _, tpot in done],
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
    args = parser.parse_args()

    synthesized = Synthesized.read(args.cdk_out)
    prefill_pod = next(p for p in synthesized.worker_pods() if p.group == "prefill")
    extra = NodeShape(AGGREGATED, prefill_pod.gpus, {AGGREGATED: float(prefill_pod.gpus)},
                      prefill_pod.accelerator)  # fmt: skip
    cluster = LocalRay(
        synthesized,
        args.run_dir,
        extra_nodes=[extra],
        extra_env={"STANDIN_TOKEN_DELAY_S": "0", "STANDIN_RECORDS": ""},
    )
    result: dict[str, Any] = {"machine": machine(), "output_tokens": OUTPUT_TOKENS, "runs": {}}
    try:
        cluster.start()
        config = copy.deepcopy(cluster.config)
        config["applications"].append(aggregated_app(config["applications"][0], AGGREGATED))
        cluster.deploy(config)
        model = config["applications"][0]["args"]["decode_config"]["model_loading_config"][
            "model_id"
        ]
        urls = {
            "pd": f"{cluster.base_url}/v1/completions",
            AGGREGATED: f"{cluster.base_url}/{AGGREGATED}/v1/completions",
        }
        for url in urls.values():  # warm both paths
            asyncio.run(run(url, model, 4, 16))
        for concurrency in args.concurrency:
            pooled: dict[str, dict[str, list[float]]] = {
                app: {"ttft": [], "tpot": []} for app in urls
            }
            failed = dict.fromkeys(urls, 0)
            busy = dict.fromkeys(urls, 0.0)
            for _ in range(args.rounds):
                for app, url in urls.items():
                    requests = concurrency * args.requests_per_stream
                    measured = asyncio.run(run(url, model, concurrency, requests))
                    pooled[app]["ttft"] += measured["ttft"]
                    pooled[app]["tpot"] += measured["tpot"]
                    failed[app] += measured["failed"]
                    busy[app] += measured["duration_s"]
            result["runs"][str(concurrency)] = {
                app: {
                    "requests": len(pooled[app]["ttft"]),
                    "failed": failed[app],
                    "ttft": summary(pooled[app]["ttft"]),
                    "tpot": summary(pooled[app]["tpot"]),
                    "requests_per_s": round(len(pooled[app]["ttft"]) / busy[app], 1),
                }
                for app in urls
            }
            result["runs"][str(concurrency)]["ratios"] = ratios(result["runs"][str(concurrency)])
            print(f"concurrency {concurrency}: done", file=sys.stderr, flush=True)
        result["ceiling"] = {app: ceiling(result["runs"], app) for app in urls}
    finally:
        cluster.stop()
    result["machine"]["load_average_after"] = os.getloadavg()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    (args.run_dir / "bench-orchestration.json").write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


def ratios(runs: dict[str, Any]) -> dict[str, float]:
    """P/D against aggregated at one concurrency, as gpu-bench reads deployed against direct:
    output tokens/s (requests/s x the fixed output length) and the TTFT p50 added."""
    pd, agg = runs["pd"], runs[AGGREGATED]
    return {
        "tokens_per_s": round(pd["requests_per_s"] / agg["requests_per_s"], 3)
        if agg["requests_per_s"]
        else 0.0,
        "ttft_p50_added_ms": round(pd["ttft"]["p50_ms"] - agg["ttft"]["p50_ms"], 2),
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
    """Markdown: each cell "P/D / aggregated (+difference)", in milliseconds."""

    def cell(runs: dict[str, Any], figure: str, quantile: str) -> str:
        pd, agg = runs["pd"][figure][quantile], runs[AGGREGATED][figure][quantile]
        return f"{pd:.1f} / {agg:.1f} ({pd - agg:+.1f})"

    lines = [
        "| streams | TTFT p50 | TTFT p99 | per token p50 | per token p99 | requests/s "
        "| P/D / aggregated tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for concurrency, runs in result["runs"].items():
        rates = " / ".join(f"{runs[app]['requests_per_s']:.0f}" for app in ("pd", AGGREGATED))
        cells = [
            cell(runs, figure, quantile)
            for figure in ("ttft", "tpot")
            for quantile in ("p50_ms", "p99_ms")
        ]
        share = ratios(runs)["tokens_per_s"]
        lines.append(f"| {concurrency} | " + " | ".join(cells) + f" | {rates} | {share:.2f} |")
    for app, found in result.get("ceiling", {}).items():
        verb = "bends after" if found["bent"] else "still grows at"
        lines.append(
            f"\n{app}: requests/s {verb} {found['streams']} streams ({found['requests_per_s']:.0f} "
            f"requests/s, {found['output_tokens_per_s']:.0f} output tokens/s)"
        )
    m = result["machine"]
    load = ", ".join(f"{value:.1f}" for value in m["load_average_before"])
    lines.append(f"\n{m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, load {load} before")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
