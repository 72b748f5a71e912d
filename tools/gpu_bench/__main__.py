"""`make gpu-bench`: the deployed serving path's speed on one GPU, against its floor.

    python -m tools.gpu_bench prepare --model-config C [--tokenizer DIR] \
        [--variant NAME=CDK_OUT ...]                 # model folder, plan, deployed variants
    python -m tools.gpu_bench hand-off push|pull     # which way the KV cache moves (hand_off.py)
    python -m tools.gpu_bench transport on|off       # UCX cuda_ipc GET zero-copy (hand_off.py)
    python -m tools.gpu_bench engines                # prefill + decode vLLM, the toy P/D proxy
    python -m tools.gpu_bench probe VARIANT          # one request: does the path answer?
    python -m tools.gpu_bench sweep VARIANT DATASET  # vllm bench serve over CONCURRENCY
    python -m tools.gpu_bench stop                   # the processes this tool started
    python -m tools.gpu_bench serve [VARIANT] [--wait]  # local Ray + a Serve app as synthesized
    python -m tools.gpu_bench ingress N              # the same app with N ingress replicas
    python -m tools.gpu_bench metrics NAME           # every /metrics page, saved for the TTFT parts
    python -m tools.gpu_bench parts RESULT METRICS   # the deployed TTFT in its parts
    python -m tools.gpu_bench collect OUT            # the result JSON and the logs
    python -m tools.gpu_bench report docs/gpu-bench/*.json [--svg DIR]

Deployed variants that change a setting (``SYNTHESIZED``) are each a `cdk synth` with their
`-c` overrides, so what runs is what the app renders for that setting, with the same one-GPU
changes as ``deployed``. During a deployed variant's sweep, each point also reads the CPU time
of the Serve processes (the ingress replica, decode's and prefill's replicas, the HTTP proxy):
the ingress's CPU per streamed token is what tells its ceiling apart from decode's relay.

Each step is its own command so that a GPU machine lent call by call can run them in a few
long calls; the processes started stay up between calls, and the state (the plan, the results
so far, the logs) lives in $GPU_BENCH_STATE (default ~/gpu-bench).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from app_config.node_labels import GPU_ROLES
from tools import cpu_use
from tools.gpu_bench import hand_off, real_size, stack, word_tokenizer
from tools.gpu_bench.results import DEPLOYED, FLOOR, BenchRun, markdown_report, write_svg
from tools.gpu_bench.run_facts import archive, point_figures
from tools.gpu_bench.workload import CONCURRENCY, DATASETS, OUTPUT_TOKENS, PROMPTS
from tools.gpu_check.deployed import DeployedRayService
from tools.gpu_check.machine import gpu_name, versions
from tools.gpu_check.one_gpu import engine_kwargs, one_gpu_serve_config, served_model
from tools.gpu_check.serve_app import one_gpu_worker_resources

ROOT = Path(__file__).resolve().parents[2]
STATE = stack.STATE
HTTP_PORT = stack.HTTP_PORT
ENVIRONMENT = stack.ENVIRONMENT
VARIANTS = {
    "direct": "prefill + decode vLLM engines, the P/D protocol by a toy proxy (no Serve)",
    "direct-pull": "direct, decode READing the KV cache as deployed (one GPU: UCX's TCP relay)",
    "aggregated": "the decode engine alone, no hand-off (what P/D is compared to)",
    "deployed": "the Serve application as synthesized (one-GPU changes listed)",
    "deployed-batching-10ms": "deployed, synthesized with serving.stream_batching_interval_ms=10",
    "deployed-batching-0ms": "deployed, synthesized with serving.stream_batching_interval_ms=0 "
    "(each token its own Serve message)",
    "deployed-ingress-2": "deployed, with 2 ingress replicas",
}
# Deployed variants that are a synthesis of their own: their `cdk synth -c` overrides (the
# Makefile's gpu-bench target synthesizes each into build/gpu-bench/<name>).
SYNTHESIZED = {
    "deployed-batching-10ms": ("serving.stream_batching_interval_ms=10",),
    "deployed-batching-0ms": ("serving.stream_batching_interval_ms=0",),
}


def record() -> BenchRun:
    return BenchRun.read(STATE / "result.json")


def prepare(args: argparse.Namespace) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    deployed = DeployedRayService.read(Path(args.cdk_out))
    model_id, _ = served_model(deployed.serve_config)
    config = json.loads(Path(args.model_config).read_text())
    model_path = STATE / "model"
    tokenizer, model_changes = word_tokenizer.given_or_built(args.tokenizer, STATE)
    model_changes += real_size.build(config, tokenizer, model_path, args.layers)
    serve_config, lines, hand_off_changes = one_gpu(deployed, model_path, args.hand_off)
    resources, resource_changes = one_gpu_worker_resources(
        {role: deployed.worker_resources(role) for role in GPU_ROLES}
    )
    variants = {}
    for entry in args.variant:
        name, _, cdk_out = entry.partition("=")
        if name not in SYNTHESIZED:
            raise SystemExit(f"gpu-bench: --variant {name}: not one of {sorted(SYNTHESIZED)}")
        variants[name] = one_gpu(DeployedRayService.read(Path(cdk_out)), model_path, args.hand_off)[
            0
        ]
    plan = {
        "deployed_serve_config": deployed.serve_config,
        "hand_off": args.hand_off,
        "get_zcopy": args.get_zcopy,
        "serve_config": serve_config,
        "variants": variants,
        "head_start_params": deployed.head_start_params,
        "worker_resources": resources,
        "model_id": model_id,
        "model_path": str(model_path),
    }
    (STATE / "plan.json").write_text(json.dumps(plan, indent=2))
    run = BenchRun(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        gpu=gpu_name(),
        model=model_id,
        architecture=f"{config['architectures'][0]} ({Path(args.model_config).name})",
        versions=versions(),
        commit=args.commit,
        changes=lines
        + resource_changes
        + [str(change) for change in hand_off_changes]
        + hand_off.transport_changes(args.get_zcopy),
        model_changes=model_changes,
        workload={
            "concurrency": list(CONCURRENCY),
            "prompts": {str(c): n for c, n in PROMPTS.items()},
            "output_tokens": OUTPUT_TOKENS,
            "datasets": {name: d.description for name, d in DATASETS.items()},
            "load_generator": "vllm bench serve (the engine image's vLLM)",
        },
        variants=dict(VARIANTS),
    )
    run.write(STATE / "result.json")
    print(f"gpu-bench: {model_id} as {run.architecture} on {run.gpu}; {run.versions}")
    for line in run.changes + run.model_changes:
        print(f"  change: {line}")


def one_gpu(
    deployed: DeployedRayService, model_path: Path, direction: str
) -> tuple[dict[str, Any], list[str], list[Any]]:
    """A synthesized Serve config as it runs on one GPU: the changes `make gpu-check` makes,
    dummy weights, the hand-off's direction; with the lines that say so."""
    serve_config, changes = one_gpu_serve_config(
        deployed.serve_config, str(model_path), efa=False, http_port=HTTP_PORT
    )
    lines = [str(change) for change in changes] + real_size.with_dummy_weights(serve_config)
    hand_off_changes = hand_off.choose(serve_config, direction, deployed.serve_config)
    return serve_config, lines, hand_off_changes


def plan() -> dict[str, Any]:
    return json.loads((STATE / "plan.json").read_text())


def switch_hand_off(args: argparse.Namespace) -> None:
    """Change the direction after `prepare` (before the engines start): the plan and the
    record's list of changes follow."""
    p = plan()
    changes = hand_off.choose(p["serve_config"], args.direction, p["deployed_serve_config"])
    p["hand_off"] = args.direction
    (STATE / "plan.json").write_text(json.dumps(p, indent=2))
    run = record()
    run.changes = [line for line in run.changes if hand_off.PUSH_REASON not in line]
    run.changes += [str(change) for change in changes]
    run.write(STATE / "result.json")
    print(f"gpu-bench: hand-off {args.direction}", flush=True)


def switch_transport(args: argparse.Namespace) -> None:
    """GET zero-copy on or off after `prepare` (before the engines or Ray start)."""
    p = plan()
    p["get_zcopy"] = args.state == "on"
    (STATE / "plan.json").write_text(json.dumps(p, indent=2))
    run = record()
    run.changes = [line for line in run.changes if hand_off.GET_ZCOPY_REASON not in line]
    run.changes += hand_off.transport_changes(p["get_zcopy"])
    run.write(STATE / "result.json")
    print(f"gpu-bench: UCX GET zero-copy {args.state}", flush=True)


def environment() -> dict[str, str]:
    """The environment of every process under test: the run's own and its transport's."""
    return {**ENVIRONMENT, **hand_off.transport_environment(plan().get("get_zcopy", False))}


def probe(args: argparse.Namespace) -> None:
    """One short completion through ``variant``'s path, so a sweep does not start against a path
    that cannot answer (exit 1, with the answer or the error)."""
    body = json.dumps(
        {"model": plan()["model_id"], "prompt": "The KV cache", "max_tokens": 8}
    ).encode()
    request = urllib.request.Request(
        f"{base_url(args.variant)}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as answer:
            text = json.loads(answer.read())["choices"][0]["text"]
    except (OSError, KeyError, ValueError) as error:
        print(f"gpu-bench: probe {args.variant} failed: {error}", flush=True)
        raise SystemExit(1) from error
    print(
        f"gpu-bench: probe {args.variant}: {time.monotonic() - start:.2f} s, {text!r}", flush=True
    )


def engines(_: argparse.Namespace) -> None:
    p = plan()
    kwargs = {role: engine_kwargs(p["serve_config"], role) for role in GPU_ROLES}
    seconds = stack.start_engines(p["model_path"], p["model_id"], kwargs, environment(), STATE)
    run = record()
    run.startup.update({f"{role} engine healthy (s)": round(s) for role, s in seconds.items()})
    run.write(STATE / "result.json")


def base_url(variant: str) -> str:
    if variant.startswith("direct"):
        return stack.proxy_url()
    if variant == "aggregated":
        return stack.engine_url("decode")
    return f"http://127.0.0.1:{HTTP_PORT}"


def sweep(args: argparse.Namespace) -> None:
    """One process per dataset runs every concurrency point (tools/gpu_bench/points.py)."""
    from tools.gpu_bench.workload import bench_args

    p = plan()
    pids = process_pids(args.variant)
    for dataset_name in args.datasets:
        dataset = DATASETS[dataset_name]
        concurrencies = args.concurrency or CONCURRENCY
        names = {c: f"{args.variant}-{dataset_name}-{c}.json" for c in concurrencies}
        argv = [
            bench_args(
                base_url(args.variant),
                p["model_id"],
                p["model_path"],
                dataset,
                c,
                str(STATE / "raw"),
                names[c],
            )
            for c in concurrencies
        ]
        points = {"points": argv, "pids": pids}
        start = time.monotonic()
        with open(STATE / "bench.log", "ab") as log:
            subprocess.run(
                [sys.executable, "-m", "tools.gpu_bench.points", json.dumps(points)],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        run = record()
        for concurrency, name in names.items():
            figures = point_figures(STATE / "raw" / name)
            run.points.setdefault(args.variant, {}).setdefault(dataset_name, {})[
                str(concurrency)
            ] = figures
            print(
                f"gpu-bench: {args.variant} {dataset_name} c={concurrency}: "
                f"{figures.get('output_throughput') or 0:.0f} tok/s, TTFT p50 "
                f"{figures.get('median_ttft_ms') or 0:.1f} ms p99 "
                f"{figures.get('p99_ttft_ms') or 0:.1f}, ITL p50 "
                f"{figures.get('median_itl_ms') or 0:.2f} ms, failed {figures.get('failed')}, "
                f"cores {figures.get('cpu_cores')}",
                flush=True,
            )
        run.write(STATE / "result.json")
        print(f"gpu-bench: {args.variant} {dataset_name}: {time.monotonic() - start:.0f} s")


def process_pids(variant: str) -> dict[str, list[int]]:
    """The processes whose CPU a variant's points read: a deployed application's Serve
    processes, the direct path's proxy and engines; none for the aggregated engine."""
    if variant.startswith(DEPLOYED):
        return serve_pids()
    if variant.startswith(FLOOR):
        return stack.direct_pids(STATE)
    return {}


def serve_pids() -> dict[str, list[int]]:
    """The running application's Serve processes by part (ingress, decode, prefill, proxy)."""
    (application,) = plan()["serve_config"]["applications"]
    app = application["name"]
    found = cpu_use.serve_pids(stack.cluster().dashboard, [app])
    return {name.removeprefix(f"{app}:"): pids for name, pids in found.items()}


def fold(args: argparse.Namespace) -> None:
    """Points whose sweep was cut short (a device call's time limit) from their saved files."""
    run = BenchRun.read(Path(args.result))
    for raw in sorted(Path(args.raw).glob("*.json")):
        variant, dataset, concurrency = raw.stem.rsplit("-", 2)
        points = run.points.setdefault(variant, {}).setdefault(dataset, {})
        points.setdefault(concurrency, point_figures(raw))
        run.points[variant][dataset] = dict(sorted(points.items(), key=lambda kv: int(kv[0])))
    run.write(Path(args.result))


def stop(_: argparse.Namespace) -> None:
    stack.stop(STATE)
    stack.stop_ray(ENVIRONMENT)


def serve(args: argparse.Namespace) -> None:
    """A Serve application as synthesized: on a fresh local Ray for the first, else in place
    of the one running (every engine restarts: each variant is a synthesis of its own)."""
    p = plan()
    config = p["serve_config"] if args.variant == DEPLOYED else p["variants"][args.variant]
    cluster = stack.cluster()
    try:
        stack.applications(cluster)
    except OSError:
        node_env = {role: hand_off.side_channel_environment(role) for role in GPU_ROLES}
        cluster = stack.start_ray(
            p["head_start_params"], p["worker_resources"], environment(), STATE, node_env
        )
    stack.replace_applications(cluster, config)
    print(f"gpu-bench: {args.variant} Serve config PUT", flush=True)
    if args.wait:
        wait(args)


def wait(args: argparse.Namespace) -> None:
    p = plan()
    (application,) = p["serve_config"]["applications"]
    seconds = stack.cluster().wait_running(application["name"], STATE / "serve-status.json")
    print(f"gpu-bench: {args.variant} RUNNING ({seconds:.0f} s of waiting)", flush=True)
    run = record()
    key = "Serve app" if args.variant == DEPLOYED else args.variant
    run.startup.setdefault(f"{key} RUNNING, waited (s)", round(seconds))
    run.write(STATE / "result.json")


def ingress(args: argparse.Namespace) -> None:
    """N ingress replicas, by a `deployments` entry for the ingress's autoscaling bounds in the
    Serve config (the options `ingress_deployment_config` gives it at build time). Not an
    in-place update here: the first PUT had no such entry, and Serve 2.58's code version counts
    the entries (_private/deploy_utils.py get_app_code_version), so Serve rebuilds the whole
    application and every engine restarts (the 2026-12-02 run; tests/e2e/warm_start.py has the
    rule and the start that avoids it)."""
    p = plan()
    cluster = stack.cluster()
    config = copy.deepcopy(p["serve_config"])
    (application,) = config["applications"]
    name = stack.ingress_name(cluster, application["name"])
    bounds = {"min_replicas": args.replicas, "max_replicas": args.replicas}
    application["deployments"] = [{"name": name, "autoscaling_config": bounds}]
    cluster.put(config)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        # The application's status drops its deployments while Serve redeploys it (seen on
        # the 2026-12-02 run: the update replaced the engines' replicas too).
        replicas = stack.deployments(cluster, application["name"]).get(name, {}).get("replicas", [])
        if sum(r.get("state") == "RUNNING" for r in replicas) >= args.replicas:
            break
        time.sleep(3)
    print(f"gpu-bench: {name} at {args.replicas} replicas", flush=True)


def metrics(args: argparse.Namespace) -> None:
    out = STATE / "metrics"
    out.mkdir(exist_ok=True)
    pages = {f"engine-{r}": f"{stack.engine_url(r)}/metrics" for r in GPU_ROLES}
    pages.update({f"ray-{n}": f"http://127.0.0.1:{port}/metrics" for n, port in
                  stack.RAY_PORTS.items() if n in ("head", *GPU_ROLES)})  # fmt: skip
    for page, url in pages.items():
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                (out / f"{args.name}-{page}.txt").write_bytes(answer.read())
        except OSError:
            continue


def parts(args: argparse.Namespace) -> None:
    from tools.gpu_bench import ttft_parts

    print(ttft_parts.table(ttft_parts.for_run(Path(args.result), Path(args.metrics), args.variant)))


def collect(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_bytes((STATE / "result.json").read_bytes())
    logs = sorted(STATE.glob("*.log")) + sorted(STATE.glob("*.json"))
    archive(out / "logs.tar.gz", STATE, logs, ("metrics", "raw"))


def report(args: argparse.Namespace) -> None:
    runs = [BenchRun.read(Path(path)) for path in args.results]
    print(markdown_report(runs))
    if args.svg:
        for run, path in zip(runs, args.results, strict=True):
            for dataset in run.workload.get("datasets", DATASETS):
                write_svg(run, dataset, Path(args.svg) / f"{Path(path).stem}-{dataset}.svg")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("--cdk-out", default=str(ROOT / "cdk.out"))
    p.add_argument("--model-config", required=True)
    p.add_argument(
        "--tokenizer", help="folder with tokenizer.json (default: word_tokenizer's, built here)"
    )
    p.add_argument(
        "--layers",
        type=int,
        help="keep only this many decoder layers (fast engines: the Serve path's ceiling)",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=CDK_OUT",
        help=f"a deployed variant's synthesis ({', '.join(SYNTHESIZED)})",
    )
    p.add_argument("--commit", default="")
    p.add_argument("--hand-off", choices=hand_off.DIRECTIONS, default="pull")
    p.add_argument(
        "--no-get-zcopy",
        dest="get_zcopy",
        action="store_false",
        help="leave UCX's cuda_ipc GET at its default (off without NVLink: the TCP relay)",
    )
    p.set_defaults(handler=prepare)
    t = commands.add_parser("transport")
    t.add_argument("state", choices=("on", "off"))
    t.set_defaults(handler=switch_transport)
    h = commands.add_parser("hand-off")
    h.add_argument("direction", choices=hand_off.DIRECTIONS)
    h.set_defaults(handler=switch_hand_off)
    commands.add_parser("engines").set_defaults(handler=engines)
    q = commands.add_parser("probe")
    q.add_argument("variant", choices=tuple(VARIANTS))
    q.add_argument("--timeout", type=float, default=120)
    q.set_defaults(handler=probe)
    s = commands.add_parser("sweep")
    s.add_argument("variant", choices=tuple(VARIANTS))
    s.add_argument("datasets", nargs="+", choices=tuple(DATASETS))
    s.add_argument("--concurrency", type=int, nargs="*")
    s.set_defaults(handler=sweep)
    commands.add_parser("stop").set_defaults(handler=stop)
    deployed_variants = (DEPLOYED, *SYNTHESIZED)
    v = commands.add_parser("serve")
    v.add_argument("variant", nargs="?", choices=deployed_variants, default=DEPLOYED)
    v.add_argument("--wait", action="store_true")
    v.set_defaults(handler=serve)
    w = commands.add_parser("wait")
    w.add_argument("variant", nargs="?", choices=deployed_variants, default=DEPLOYED)
    w.set_defaults(handler=wait)
    i = commands.add_parser("ingress")
    i.add_argument("replicas", type=int)
    i.set_defaults(handler=ingress)
    m = commands.add_parser("metrics")
    m.add_argument("name")
    m.set_defaults(handler=metrics)
    pt = commands.add_parser("parts")
    pt.add_argument("result")
    pt.add_argument("metrics", help="the folder of the run's saved /metrics pages")
    pt.add_argument("--variant", default="deployed")
    pt.set_defaults(handler=parts)
    c = commands.add_parser("collect")
    c.add_argument("out")
    c.set_defaults(handler=collect)
    f = commands.add_parser("fold")
    f.add_argument("raw")
    f.add_argument("result")
    f.set_defaults(handler=fold)
    r = commands.add_parser("report")
    r.add_argument("results", nargs="+")
    r.add_argument("--svg")
    r.set_defaults(handler=report)
    args = parser.parse_args(argv)
    args.handler(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
