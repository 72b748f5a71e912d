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

``--ingress N ...`` measures the ingress's ceiling instead: the P/D application as synthesized
with N ingress replicas (``ingress_deployment_config`` min = max = N), one application per N
on nodes of its own, run alternately as above. Each measurement also reads the CPU time of the
variant's Serve processes (its ingress replicas, the proxies, its decode and prefill replicas,
found by their Ray actors' pids) and the machine's foreign load (tools/cpu_use.py); a measurement
that ran while other processes took more than ``--max-foreign-cores`` is run again (at most
``--retries`` times, the least loaded kept). The ingress's ceiling is where its latency
bends: the highest concurrency before TTFT p50 or the time per output token p50 exceeds
``LATENCY_BEND`` times its value at the lowest concurrency, with its streams, output tokens/s
and the ingress's CPU per request there (``bend``).

``--breakdown`` (P/D against the aggregated app) also cuts each TTFT into its hops from the
client's, Serve's access log's and the stand-in engine's timestamps (ttft_breakdown.py); the
stand-in then writes its request records (``STANDIN_RECORDS``), a file write per request.
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
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from harness import PROJECT_ROOT, LocalRay, NodeShape, Synthesized

sys.path.insert(0, str(PROJECT_ROOT))

import ttft_breakdown

from tools import cpu_use
from tools.cpu_use import serve_pids

CONCURRENCY = (1, 8, 64)
# A step up in streams that raises requests/s by less than this share: the path has bent.
BEND = 0.10
# The ingress sweep's bend: TTFT p50 or time per output token p50 this many times its value at
# the lowest concurrency. A time per token below the floor (a stand-in without token time
# sends the whole answer in one batch) does not count.
LATENCY_BEND = 2.0
TPOT_FLOOR_MS = 0.5
# A measurement during which other processes used more than this many of the machine's cores
# is repeated (--max-foreign-cores).
MAX_FOREIGN_CORES = 0.25
# How long the Serve processes' CPU is read with no traffic, before the sweep.
IDLE_S = 10.0
# How long the breakdown waits for the last request's access lines before it reads the logs.
LOG_SETTLE_S = 2.0
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


def ingress_name(replicas: int) -> str:
    return f"{PD}-ingress-{replicas}"


def at_rays_default(pd_app: dict[str, Any]) -> dict[str, Any]:
    """The P/D application with Ray's own stream batching interval: no interval on either side."""
    app = copy.deepcopy(pd_app)
    for side in ("prefill_config", "decode_config"):
        llm = app["args"][side]
        llm.get("experimental_configs", {}).pop(INTERVAL_KEY, None)
        if llm.get("experimental_configs") == {}:
            del llm["experimental_configs"]
    return app


def variant_app(pd_app: dict[str, Any], name: str) -> dict[str, Any]:
    """The P/D application as an application of its own: its name and route prefix, and
    bundles that ask for its extra nodes' resources (``<side>-<name>``) instead of the
    RayService pods'."""
    app = copy.deepcopy(pd_app)
    app["name"], app["route_prefix"] = name, f"/{name}"
    for role in ("prefill", "decode"):
        llm = app["args"][f"{role}_config"]
        bundle = llm["placement_group_config"]["bundle_per_worker"]
        bundle.pop(role, None)
        bundle[f"{role}-{name}"] = 1
    return app


def interval_app(pd_app: dict[str, Any], interval_ms: float) -> dict[str, Any]:
    """The same P/D application at another decode stream batching interval."""
    app = variant_app(at_rays_default(pd_app), interval_name(interval_ms))
    app["args"]["decode_config"].setdefault("experimental_configs", {})[INTERVAL_KEY] = interval_ms
    return app


def ingress_app(pd_app: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The P/D application as synthesized with exactly ``replicas`` ingress replicas: the
    builder deep-merges ``ingress_deployment_config`` over Ray's DEFAULT_INGRESS_OPTIONS
    (ingress.py; its target of 1e9 ongoing requests never scales), so min = max pins the
    count whatever serving.ingress rendered."""
    app = variant_app(pd_app, ingress_name(replicas))
    app["args"]["ingress_deployment_config"] = {
        "autoscaling_config": {"min_replicas": replicas, "max_replicas": replicas}
    }
    return app


# TTFT, time per output token, gaps, and the request's id with when it was sent and when its
# first token came (time.time(), for the breakdown).
Measured = tuple[float, float, list[float], str, float, float]


async def one_stream(session: aiohttp.ClientSession, url: str, model: str) -> Measured | None:
    """(TTFT, time per output token, gaps between consecutive content chunks, request id, sent,
    first token) of one streamed completion; None when it failed. A chunk is timed when its
    line arrives: the chunks of one batch arrive together, their gaps near zero. The request
    names its own id (X-Request-Id), which Serve logs at every hop."""
    body = {"model": model, "prompt": "bench", "max_tokens": OUTPUT_TOKENS, "stream": True}
    request_id = uuid.uuid4().hex
    sent = time.time()
    start = time.perf_counter()
    first, last, tokens = None, None, 0
    gaps: list[float] = []
    async with session.post(url, json=body, headers={"X-Request-Id": request_id}) as response:
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
    return (
        first - start,
        (last - first) / (tokens - 1),
        gaps,
        request_id,
        sent,
        sent + first - start,
    )


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
        "ttft": [found[0] for found in done],
        "tpot": [found[1] for found in done],
        "gap": [gap for found in done for gap in found[2]],
        "client": {found[3]: (found[4], found[5]) for found in done},
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


def measure(
    url: str, model: str, concurrency: int, requests: int, pids: dict[str, list[int]]
) -> dict[str, Any]:
    """One point of one application, with the CPU its processes and everybody else used."""
    before = cpu_use.Sample.take(pids)
    measured = asyncio.run(run(url, model, concurrency, requests))
    measured["cpu"] = cpu_use.use_between(before, cpu_use.Sample.take(pids))
    return measured


def cpu_figures(
    app: str, used: list[dict[str, Any]], requests: int, idle: dict[str, Any]
) -> dict[str, Any]:
    """An application's CPU at one concurrency over its measurements: each part's cores (CPU
    seconds over the measurements' wall seconds), the ingress's CPU per request above what it
    spends idle (Serve's own health checks and metrics, ``idle``: cores measured with no
    traffic), and the foreign load of each measurement."""
    wall = sum(u["wall_s"] for u in used)

    def seconds(part: str) -> float:
        return sum(u["cpu_s"][part] for u in used)

    ingress = seconds(f"{app}:ingress")
    idle_ingress = idle["cpu_s"][f"{app}:ingress"] / idle["wall_s"] * wall
    return {
        "ingress_cores": round(ingress / wall, 3),
        "ingress_cpu_ms_per_request": round((ingress - idle_ingress) / requests * 1000, 3),
        "proxy_cores": round(seconds("proxy") / wall, 3),
        "decode_cores": round(seconds(f"{app}:decode") / wall, 3),
        "prefill_cores": round(seconds(f"{app}:prefill") / wall, 3),
        "foreign_cores": [u["foreign_cores"] for u in used],
        "load_average_before": used[0]["load_average_before"],
        "load_average_after": used[-1]["load_average_after"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cdk-out", type=Path, default=PROJECT_ROOT / "cdk.out")
    parser.add_argument("--run-dir", type=Path, default=PROJECT_ROOT / "build" / "e2e-bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests-per-stream", type=int, default=8)
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--intervals",
        type=float,
        nargs="+",
        default=[],
        help="decode stream batching intervals (ms) to measure against Ray's default, "
        "instead of P/D against the aggregated app",
    )
    modes.add_argument(
        "--ingress",
        type=int,
        nargs="+",
        default=[],
        help="ingress replica counts to measure side by side (the first is the baseline), "
        "instead of P/D against the aggregated app",
    )
    modes.add_argument(
        "--breakdown",
        action="store_true",
        help="P/D against the aggregated app, each TTFT cut into its hops",
    )
    parser.add_argument(
        "--token-delay-s", type=float, default=0.0, help="the stand-in's time per output token"
    )
    parser.add_argument(
        "--max-foreign-cores",
        type=float,
        default=MAX_FOREIGN_CORES,
        help="--ingress: repeat a measurement during which other processes used more cores",
    )
    parser.add_argument("--retries", type=int, default=2, help="--ingress: repeats at most")
    parser.add_argument(
        "--retry-wait-s", type=float, default=10.0, help="--ingress: wait before a repeat"
    )
    parser.add_argument("--report", type=Path, help="print the table of a written result")
    args = parser.parse_args()
    if args.report:
        print(table(json.loads(args.report.read_text())))
        return
    if any(interval < 0 for interval in args.intervals):
        parser.error("--intervals: Ray Serve LLM's Batcher needs an interval >= 0")
    if any(replicas < 1 for replicas in args.ingress):
        parser.error("--ingress: Serve needs at least one ingress replica")

    synthesized = Synthesized.read(args.cdk_out)
    prefill_pod = next(p for p in synthesized.worker_pods() if p.group == "prefill")
    decode_pod = next(p for p in synthesized.worker_pods() if p.group == "decode")
    variants = [interval_name(i) for i in args.intervals] + [ingress_name(n) for n in args.ingress]
    if variants:
        # Per variant one node per side, shaped like the side's pod: a replica's bundles
        # take a node's GPUs and half its CPUs, so two replicas do not fit one node.
        extras = [
            NodeShape(f"{pod.group}-{name}", pod.gpus, {f"{pod.group}-{name}": float(pod.gpus)},
                      pod.accelerator)
            for name in variants
            for pod in (prefill_pod, decode_pod)
        ]  # fmt: skip
    else:
        extras = [NodeShape(AGGREGATED, prefill_pod.gpus, {AGGREGATED: float(prefill_pod.gpus)},
                            prefill_pod.accelerator)]  # fmt: skip
    env = {"STANDIN_TOKEN_DELAY_S": str(args.token_delay_s)}
    if not args.breakdown:
        env["STANDIN_RECORDS"] = ""  # the breakdown needs the engine's timestamps; else none
    cluster = LocalRay(synthesized, args.run_dir, extra_nodes=extras, extra_env=env)
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
        decode_configs = synthesized_app["args"]["decode_config"].get("experimental_configs")
        synthesized_interval = (decode_configs or {}).get(INTERVAL_KEY)
        if args.intervals:
            config["applications"] = [at_rays_default(synthesized_app)] + [
                interval_app(synthesized_app, interval) for interval in args.intervals
            ]
            apps = {PD: None} | {interval_name(i): i for i in args.intervals}
            result["baseline"] = PD
        elif args.ingress:
            config["applications"] = [ingress_app(synthesized_app, n) for n in args.ingress]
            apps = {ingress_name(n): synthesized_interval for n in args.ingress}
            result["baseline"] = ingress_name(args.ingress[0])
            result["ingress_replicas"] = {ingress_name(n): n for n in args.ingress}
            result["max_foreign_cores"] = args.max_foreign_cores
        else:
            config["applications"].append(aggregated_app(synthesized_app, AGGREGATED))
            apps = {PD: synthesized_interval, AGGREGATED: None}
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
        pids = serve_pids(cluster.dashboard, list(apps)) if args.ingress else {}
        if args.ingress:
            result["processes"] = {part: len(found) for part, found in pids.items()}
        for url in urls.values():  # warm every path
            asyncio.run(run(url, model, 4, 16))
        if args.ingress:  # what the Serve processes spend with no traffic
            before = cpu_use.Sample.take(pids)
            time.sleep(IDLE_S)
            result["idle"] = cpu_use.use_between(before, cpu_use.Sample.take(pids))
        for concurrency in args.concurrency:
            pooled: dict[str, dict[str, list[float]]] = {
                app: {"ttft": [], "tpot": [], "gap": []} for app in urls
            }
            failed = dict.fromkeys(urls, 0)
            busy = dict.fromkeys(urls, 0.0)
            used: dict[str, list[dict[str, Any]]] = {app: [] for app in urls}
            repeated = dict.fromkeys(urls, 0)
            client: dict[str, dict[str, tuple[float, float]]] = {app: {} for app in urls}
            for _ in range(args.rounds):
                for app, url in urls.items():
                    requests = concurrency * args.requests_per_stream
                    if args.ingress:
                        attempts = [measure(url, model, concurrency, requests, pids)]
                        while (
                            attempts[-1]["cpu"]["foreign_cores"] > args.max_foreign_cores
                            and len(attempts) <= args.retries
                        ):
                            time.sleep(args.retry_wait_s)  # let a burst of other work pass
                            attempts.append(measure(url, model, concurrency, requests, pids))
                        measured = min(attempts, key=lambda m: m["cpu"]["foreign_cores"])
                        repeated[app] += len(attempts) - 1
                        used[app].append(measured["cpu"])
                    else:
                        measured = asyncio.run(run(url, model, concurrency, requests))
                    for figure in pooled[app]:
                        pooled[app][figure] += measured[figure]
                    failed[app] += measured["failed"]
                    busy[app] += measured["duration_s"]
                    client[app] |= measured["client"]
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
            if args.ingress:
                for app in urls:
                    runs[app]["cpu"] = cpu_figures(
                        app, used[app], runs[app]["requests"], result["idle"]
                    )
                    runs[app]["cpu"]["repeated"] = repeated[app]
            runs["ratios"] = {
                app: ratios(runs, app, result["baseline"])
                for app in urls
                if app != result["baseline"]
            }
            if args.breakdown:
                # The proxy writes a request's access line once its last message has gone: the
                # client can have read [DONE] first.
                time.sleep(LOG_SETTLE_S)
                log_dir = cluster.session_dir / "logs" / "serve"
                records = cluster.records()
                result.setdefault("breakdown", {})[str(concurrency)] = {
                    app: ttft_breakdown.breakdown(
                        client[app],
                        ttft_breakdown.serve_starts(log_dir, set(client[app])),
                        ttft_breakdown.engine_times(records, set(client[app])),
                        ttft_breakdown.PD_SEGMENTS
                        if app == PD
                        else ttft_breakdown.AGGREGATED_SEGMENTS,
                    )
                    for app in urls
                }
            result["runs"][str(concurrency)] = runs
            print(
                f"concurrency {concurrency}: done, load {os.getloadavg()[0]:.1f}"
                + "".join(
                    f"; {app} foreign cores {runs[app]['cpu']['foreign_cores']}"
                    for app in urls
                    if "cpu" in runs[app]
                ),
                file=sys.stderr,
                flush=True,
            )
        result["ceiling"] = {app: ceiling(result["runs"], app) for app in urls}
        if args.ingress:
            result["bend"] = {app: latency_bend(result["runs"], app) for app in urls}
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


def latency_bend(runs: dict[str, Any], app: str) -> dict[str, Any]:
    """The ingress sweep's ceiling: the highest concurrency before TTFT p50 or the time per
    output token p50 first exceeds LATENCY_BEND times its value at the lowest concurrency, with
    its output tokens/s and the ingress's CPU there; the last one measured if none bends."""
    points = sorted((int(c), figures[app]) for c, figures in runs.items())
    low = points[0][1]

    def bent(figures: dict[str, Any]) -> bool:
        if figures["ttft"]["p50_ms"] > LATENCY_BEND * low["ttft"]["p50_ms"]:
            return True
        floor = low["tpot"]["p50_ms"]
        return floor >= TPOT_FLOOR_MS and figures["tpot"]["p50_ms"] > LATENCY_BEND * floor

    best, bent_at = points[0], None
    for point in points[1:]:
        if bent(point[1]):
            bent_at = point[0]
            break
        best = point
    streams, figures = best
    return {
        "streams": streams,
        "requests_per_s": figures["requests_per_s"],
        "output_tokens_per_s": round(figures["requests_per_s"] * OUTPUT_TOKENS, 1),
        "ingress_cores": figures["cpu"]["ingress_cores"],
        "ingress_cpu_ms_per_request": figures["cpu"]["ingress_cpu_ms_per_request"],
        "bent_at": bent_at,
    }


def cpu_cells(figures: dict[str, Any]) -> str:
    """The ingress sweep's CPU columns: the ingress's cores and CPU per request, the proxies'
    and decode's cores, the highest foreign load of the kept measurements, the measurements
    repeated for foreign load, and the 1-minute load average (``uptime``) before the point's
    first and after its last measurement."""
    cpu = figures["cpu"]
    return (
        f" {cpu['ingress_cores']:.2f} | {cpu['ingress_cpu_ms_per_request']:.2f}"
        f" | {cpu['proxy_cores']:.2f} | {cpu['decode_cores']:.2f}"
        f" | {max(cpu['foreign_cores']):.2f} | {cpu['repeated']}"
        f" | {cpu['load_average_before'][0]:.0f} / {cpu['load_average_after'][0]:.0f} |"
    )


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
    with_cpu = "bend" in result
    lines = [
        "| streams | application (interval) | TTFT p50 | TTFT p99 | per token p50 "
        "| per token p99 | gap p50 | gap p99 | requests/s | tok/s vs baseline |"
        + (
            " ingress cores | ingress CPU ms/request above idle | proxy cores | decode cores "
            "| foreign cores | repeated | load before / after |"
            if with_cpu
            else ""
        ),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" * 7 if with_cpu else ""),
    ]
    for concurrency, runs in result["runs"].items():
        for app in [a for a in runs if a != "ratios"]:
            cells = [cell(runs, app, figure, quantile) for figure, quantile in figures]
            share = "" if app == baseline else f"{ratios(runs, app, baseline)['tokens_per_s']:.2f}"
            lines.append(
                f"| {concurrency} | {label(app)} | "
                + " | ".join(cells)
                + f" | {runs[app]['requests_per_s']:.0f} | {share} |"
                + (cpu_cells(runs[app]) if with_cpu else "")
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
    for app, found in result.get("bend", {}).items():
        where = (
            f"bends at {found['bent_at']} streams"
            if found["bent_at"] is not None
            else "has not bent at the highest concurrency"
        )
        lines.append(
            f"\n{label(app)}: latency {where} (TTFT p50 or per token p50 above "
            f"{LATENCY_BEND:g}x its {min(int(c) for c in result['runs'])}-stream value); "
            f"{found['streams']} streams before it: {found['output_tokens_per_s']:.0f} output "
            f"tokens/s, the ingress {found['ingress_cores']:.2f} cores, "
            f"{found['ingress_cpu_ms_per_request']:.2f} ms CPU per request above idle"
        )
    if "idle" in result:
        idle = result["idle"]
        lines.append(
            "\nIdle (no traffic, "
            f"{idle['wall_s']:.0f} s): "
            + ", ".join(
                f"{part} {seconds / idle['wall_s']:.3f} cores"
                for part, seconds in idle["cpu_s"].items()
                if part.endswith(":ingress") or part == "proxy"
            )
        )
    for concurrency, parts in result.get("breakdown", {}).items():
        lines.append(f"\nTTFT by hop at {concurrency} streams (ms):\n")
        lines.append(ttft_breakdown.table(parts))
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
