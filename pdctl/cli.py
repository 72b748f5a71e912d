"""`pdctl`: preflight before deploy, proof after deploy that KV crossed EFA, KV sizing, bench, cost.

Every command reads the same configuration as `cdk synth` (cdk.json, `--config`, `-c`), prints a
table for people or JSON for machines (`--json`), and exits non-zero when a check fails.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import boto3
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from app_config import ConfigError, Settings, load_settings
from app_config.cli_context import cli_context
from catalog.instances import CATALOG
from pdctl import (
    bench_job,
    cost,
    efa_jobs,
    efa_results,
    efa_run,
    image,
    kv_plan,
    preflight,
    scan_report,
    verify,
)
from pdctl.checks import Check
from serving_manifests.image import pod_image
from serving_manifests.names import METRICS_PORT, SERVE_PORT, endpoint_service_name

app = typer.Typer(
    help=__doc__.splitlines()[0], no_args_is_help=True, pretty_exceptions_enable=False
)
console = Console()

ConfigOption = Annotated[str | None, typer.Option("--config", help="YAML configuration file")]
ContextOption = Annotated[list[str], typer.Option("-c", "--context", help="key=value override")]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]


def _settings(config: str | None, context: list[str]) -> Settings:
    try:
        return load_settings(cli_context(config, context))
    except (ConfigError, ValueError) as error:
        console.print(f"[red]{error}[/red]")
        raise typer.Exit(2) from None


def _report(checks: list[Check], as_json: bool, title: str) -> None:
    if as_json:
        print(json.dumps([check.as_dict() for check in checks], indent=2))
    else:
        table = Table(title=title)
        for column in ("check", "result", "detail", "fix"):
            table.add_column(column)
        for check in checks:
            mark = "[green]pass[/green]" if check.ok else "[red]FAIL[/red]"
            table.add_row(check.name, mark, check.detail, check.fix)
        console.print(table)
    if not all(check.ok for check in checks):
        raise typer.Exit(1)


@app.command("preflight")
def preflight_command(
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006 (typer reads the default)
    window_hours: Annotated[int, typer.Option(help="reservations must outlast this")] = 24,
    as_json: JsonOption = False,
) -> None:
    """Read-only checks of the target account: capacity, quota, reservations, bootstrap, image,
    leftover log groups."""
    settings = _settings(config, context)
    session = boto3.Session(region_name=settings.region)
    clients = {name: session.client(name) for name in preflight.CLIENTS}
    with console.status("Checking the account...", spinner="dots"):
        checks = preflight.run_preflight(clients, settings, window=timedelta(hours=window_hours))
    _report(checks, as_json, f"Preflight for {settings.region}")


@app.command("plan")
def plan_command(
    model_config: Annotated[
        str, typer.Option(help="the model's config.json, or a Hugging Face model id")
    ],
    input_tokens: Annotated[int, typer.Option(min=1)] = 4096,
    output_tokens: Annotated[int, typer.Option(min=1)] = 512,
    instance_type: Annotated[str | None, typer.Option(help="default: the prefill nodes'")] = None,
    tensor_parallel: Annotated[
        int | None, typer.Option(min=1, help="default: the configured TP")
    ] = None,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """KV bytes per token and per request, EFA vs TCP transfer time, memory, and a verdict."""
    settings = _settings(config, context)
    chosen = instance_type or settings.gpu_nodes.prefill.instance_type
    if chosen not in CATALOG:
        console.print(f"[red]--instance-type {chosen}: valid: {', '.join(CATALOG)}[/red]")
        raise typer.Exit(2)
    instance = CATALOG[chosen]
    configured_tp, pp = settings.replica_gpus("prefill")
    tp = tensor_parallel or configured_tp
    if tp * pp > instance.gpus:
        console.print(
            f"[red]TP {tp} x PP {pp} needs {tp * pp} GPUs; one {instance.name} has "
            f"{instance.gpus}[/red]"
        )
        raise typer.Exit(2)
    try:
        shape = kv_plan.model_shape(kv_plan.load_model_config(model_config))
    except OSError as error:
        console.print(f"[red]{model_config}: cannot read it: {error}[/red]")
        raise typer.Exit(2) from None
    except kv_plan.UnsupportedModelError as error:
        console.print(f"[red]{model_config}: cannot size this model: {error}[/red]")
        raise typer.Exit(2) from None
    if shape.attention_heads % tp:
        console.print(
            f"[red]TP {tp} does not divide the model's {shape.attention_heads} attention heads; "
            "vLLM refuses such a split[/red]"
        )
        raise typer.Exit(2)
    result = kv_plan.plan(
        shape,
        instance,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        gpu_memory_utilization=settings.serving.prefill.gpu_memory_utilization,
    )
    if as_json:
        print(
            json.dumps(
                {"instance_type": instance.name, "tensor_parallel": tp, **result.as_dict()},
                indent=2,
            )
        )
        return
    table = Table(title=f"{model_config} on {instance.name}, TP {tp}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("KV bytes per token", f"{result.kv_bytes_per_token:,}"),
        (f"KV bytes per request ({input_tokens} input tokens)", f"{result.kv_bytes_per_request:,}"),
        (
            f"transfer over EFA ({instance.efa_bandwidth_gbps} Gbps x {kv_plan.EFA_EFFICIENCY})",
            f"{result.transfer_seconds_efa * 1000:.2f} ms",
        ),
        (
            f"transfer over TCP ({kv_plan.TCP_SINGLE_FLOW_GBPS:.0f} Gbps flow)",
            f"{result.transfer_seconds_tcp * 1000:.1f} ms",
        ),
        ("prefill compute (estimate)", f"{result.prefill_seconds * 1000:.1f} ms"),
        ("weights per GPU", f"{result.weights_bytes_per_gpu / 2**30:.1f} GiB"),
        ("KV budget per GPU", f"{result.kv_budget_bytes_per_gpu / 2**30:.1f} GiB"),
        ("concurrent sequences per replica", f"{result.max_concurrent_sequences:,}"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(("[green]" if result.pays_off else "[yellow]") + result.verdict)


@app.command("verify")
def verify_command(
    url: Annotated[
        str | None, typer.Option(help="endpoint; default: the EndpointUrl output")
    ] = None,
    metrics_url: Annotated[
        list[str], typer.Option(help="decode metrics URLs; default: through the Kubernetes API")
    ] = [],  # noqa: B006
    metrics_port: int = METRICS_PORT,
    timeout: Annotated[
        float, typer.Option(min=1, help="seconds any one network call may take")
    ] = verify.DEFAULT_TIMEOUT_SECONDS,
    metrics_wait: Annotated[
        float,
        typer.Option(
            min=0, help="seconds to wait for the decode metrics to show the completion's transfer"
        ),
    ] = verify.METRICS_EXPORT_WAIT_SECONDS,
    slow_transfer_ms: Annotated[
        float,
        typer.Option(min=0.1, help="a mean KV transfer slower than this points at the fabric"),
    ] = verify.SLOW_TRANSFER_SECONDS * 1000,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """List models, stream one completion (TTFT, ITL), and prove KV moved over NIXL."""
    settings = _settings(config, context)
    base = url or _stack_output(settings, "EndpointUrl")
    try:
        checks = _verify(
            settings, base, metrics_url, metrics_port, timeout, metrics_wait, slow_transfer_ms
        )
    except verify.VerifyError as error:
        console.print(f"[red]pdctl verify {base}: {error}[/red]")
        raise typer.Exit(1) from None
    except Exception as error:  # anything else an endpoint can provoke: still one line
        console.print(f"[red]pdctl verify {base}: {type(error).__name__}: {error}[/red]")
        raise typer.Exit(1) from None
    _report(checks, as_json, f"Verify {base}")


def _verify(
    settings: Settings,
    base: str,
    metrics_url: list[str],
    metrics_port: int,
    timeout: float,
    metrics_wait: float,
    slow_transfer_ms: float,
) -> list[Check]:
    client = verify.client_for(base, timeout)
    checks: list[Check] = []
    models = verify.list_models(client)
    served = settings.serving.model.id in models
    checks.append(
        Check(
            f"model {settings.serving.model.id} listed",
            served,
            ", ".join(models) or "no model",
            "" if served else "wait for the RayService to turn healthy",
        )
    )
    if not served:
        return checks

    def read_metrics() -> verify.TransferEvidence:
        texts = (
            [verify.fetch_text(metrics, timeout) for metrics in metrics_url]
            if metrics_url
            else verify.decode_metrics_from_kubernetes(
                settings.serving.namespace, settings.serving.name, metrics_port, timeout
            )
        )
        return verify.transfer_evidence(texts)

    before = read_metrics()
    with console.status("Streaming one chat completion...", spinner="dots"):
        timing = verify.stream_one_completion(
            client, settings.serving.model.id, "Say hello.", deadline_seconds=4 * timeout
        )
    checks.append(
        Check(
            "one streamed completion",
            True,
            f"{timing.tokens} chunks, TTFT {timing.time_to_first_token * 1000:.0f} ms, "
            f"mean ITL {timing.mean_itl * 1000:.1f} ms",
        )
    )
    evidence = verify.await_transfers(read_metrics, before, metrics_wait)
    checks.append(
        verify.kv_verdict(evidence, settings.serving.kv_transfer.backend, slow_transfer_ms / 1000)
    )
    return checks


@app.command("bench")
def bench_command(
    input_tokens: Annotated[int, typer.Option(min=1)] = 1024,
    output_tokens: Annotated[int, typer.Option(min=1)] = 256,
    concurrency: Annotated[int, typer.Option(min=1)] = 16,
    prompts: Annotated[int, typer.Option(min=1)] = 200,
    save: Annotated[Path, typer.Option(help="where the result JSON goes")] = Path(
        "bench-result.json"
    ),
    timeout_minutes: Annotated[int, typer.Option(min=1)] = 60,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """Run `vllm bench serve` from the Ray LLM image as a Job against the endpoint."""
    from kubernetes import client, utils
    from kubernetes import config as kube_config

    settings = _settings(config, context)
    serving = settings.serving
    parameters = bench_job.BenchParameters(
        # The load balancer's Service: the network policies admit the bench to its pods.
        base_url=f"http://{endpoint_service_name(settings)}.{serving.namespace}.svc:{SERVE_PORT}",
        model=serving.model.id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        concurrency=concurrency,
        prompts=prompts,
    )
    name = f"pdctl-bench-{int(time.time())}"
    manifest = bench_job.job_manifest(
        name, serving.namespace, pod_image(settings, _account(settings)), parameters
    )
    kube_config.load_kube_config()
    utils.create_from_dict(client.ApiClient(), manifest)
    batch, core = client.BatchV1Api(), client.CoreV1Api()
    deadline = time.monotonic() + timeout_minutes * 60
    with console.status(f"Job {name}: running vllm bench serve...", spinner="dots") as status:
        while True:
            job = batch.read_namespaced_job_status(name, serving.namespace).status
            if job.succeeded or job.failed:
                break
            if time.monotonic() > deadline:
                console.print(f"[red]Job {name} still running after {timeout_minutes} min[/red]")
                raise typer.Exit(1)
            status.update(f"Job {name}: {job.active or 0} pod(s) active")
            time.sleep(10)
    (pod,) = core.list_namespaced_pod(serving.namespace, label_selector=f"job-name={name}").items
    logs = core.read_namespaced_pod_log(pod.metadata.name, serving.namespace)
    if job.failed:
        console.print(f"[red]Job {name} failed; the end of its log:[/red]\n{logs[-3000:]}")
        raise typer.Exit(1)
    result = bench_job.result_from_logs(logs)
    save.write_text(json.dumps(result, indent=2))
    _print_bench(bench_job.summarize(result), as_json, save)


def _print_bench(summary: bench_job.BenchSummary, as_json: bool, saved: Path) -> None:
    if as_json:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    table = Table(
        title=f"vllm bench serve ({summary.completed} completed, {summary.failed} failed)"
    )
    table.add_column("metric")
    for column in ("mean", "median", "p50", "p90", "p99"):
        table.add_column(f"{column} (ms)", justify="right")
    for metric, figures in summary.latencies_ms.items():
        cells = [
            f"{figures[c]:.1f}" if c in figures else ""
            for c in ("mean", "median", "p50", "p90", "p99")
        ]
        table.add_row(metric.upper(), *cells)
    console.print(table)
    console.print(
        f"{summary.request_throughput:.2f} requests/s, {summary.output_throughput:.0f} output "
        f"tokens/s over {summary.duration_s:.0f} s; result saved to {saved}"
    )


@app.command("image")
def image_command(
    registry: Annotated[
        bool, typer.Option(help="ask the region's DLC registry for the tag's digest now")
    ] = True,
    from_cluster: Annotated[
        bool, typer.Option(help="read the digests the Ray pods run (kubectl context)")
    ] = False,
    scan_report: Annotated[
        bool,
        typer.Option(help="ECR's or Amazon Inspector's findings (needs serving.image_cache)"),
    ] = False,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """The pinned image, its versions, the digest the registry holds and the pods run."""
    from botocore.config import Config

    settings = _settings(config, context)
    ecr = (
        boto3.client(
            "ecr",
            region_name=settings.region,
            config=Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 2}),
        )
        if registry
        else None
    )
    pod_images = _pod_image_ids(settings) if from_cluster else []
    account = _account(settings)
    result = image.report(settings, ecr, pod_images, pod_image(settings, account), account=account)
    scan = _scan_report(settings, ecr, account) if scan_report else None
    if as_json:
        print(json.dumps({**result.as_dict(), "scan": scan.as_dict() if scan else None}, indent=2))
        return
    table = Table(title=f"Ray LLM image in {settings.region}")
    table.add_column("item")
    table.add_column("value")
    table.add_row("tag", result.tag)
    table.add_row("pods pull", result.uri)
    for name, version in result.versions.items():
        table.add_row(name, version)
    table.add_row("pinned digest", result.pinned_digest or "none (by tag)")
    table.add_row(
        "registry digest now",
        Text(result.registry_digest or f"? ({result.registry_error})"),  # AWS's text, as text
    )
    if result.pinned_in_cache is not None:
        table.add_row("pinned build in cache", "yes" if result.pinned_in_cache else "no")
    if from_cluster:
        table.add_row("running digests", ", ".join(result.running_digests) or "no Ray pod found")
    console.print(table)
    console.print(result.verdict, markup=False, highlight=False)
    if scan:
        counts = ", ".join(f"{n} {s.lower()}" for s, n in scan.counts.items()) or "none"
        # Text from AWS is printed as text, never as rich markup.
        console.print(
            f"scan of {scan.repository}: {scan.status}; findings: {counts}",
            markup=False,
            highlight=False,
        )
        console.print(scan.verdict, markup=False, highlight=False)


def _scan_report(settings: Settings, ecr: Any, account: str | None) -> scan_report.ScanSummary:
    if not settings.serving.image_cache.enabled or ecr is None or not account:
        console.print(
            "[red]--scan-report reads the scan of the account's cached copy: it needs "
            "serving.image_cache.enabled (AWS's DLC registry is another account's) and the "
            "registry (not --no-registry)[/red]"
        )
        raise typer.Exit(2)
    return scan_report.scan_summary(ecr, settings, account)


def _pod_image_ids(settings: Settings) -> list[str]:
    from kubernetes import client
    from kubernetes import config as kube_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    try:
        kube_config.load_kube_config()
        pods = client.CoreV1Api().list_namespaced_pod(
            settings.serving.namespace,
            label_selector=f"llm-serving/rayservice={settings.serving.name}",
            _request_timeout=30,
        )
    except (ApiException, ConfigException, OSError) as error:
        console.print(f"[red]reading the Ray pods failed: {type(error).__name__}: {error}[/red]")
        raise typer.Exit(1) from None
    return [
        status.image_id
        for pod in pods.items
        for status in (pod.status.container_statuses or [])
        if status.image_id
    ]


@app.command("efa-check")
def efa_check_command(
    prefill_node: Annotated[
        str | None, typer.Option(help="a prefill node by name; default: any of the group")
    ] = None,
    decode_node: Annotated[
        str | None, typer.Option(help="a decode node by name; default: any of the group")
    ] = None,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """EFA devices and a ping-pong over every device pair between a prefill and a decode node,
    from the Ray LLM image, judged against the catalog's line rate."""
    settings = _settings(config, context)
    plan = efa_jobs.plan_for(
        settings,
        f"pdctl-efa-check-{int(time.time())}",
        {"prefill": prefill_node, "decode": decode_node},
        _account(settings),
    )
    try:
        with console.status(
            f"Jobs {plan.name}-*: EFA ping-pong (at most {plan.deadline_seconds} s)...",
            spinner="dots",
        ):
            output = efa_run.run(efa_run.KubernetesJobs(), plan)
    except efa_run.EfaCheckError as error:
        console.print(f"[red]pdctl efa-check: {error}[/red]")
        raise typer.Exit(1) from None
    expected = {
        role: efa_results.expectation(group.instance)
        for role, group in settings.gpu_nodes.groups().items()
    }
    checks, sides = efa_results.evaluate(output.logs, expected, settings.gpu_nodes.efa_check)
    if as_json:
        print(
            json.dumps(
                {
                    "nodes": output.nodes,
                    "checks": [check.as_dict() for check in checks],
                    "sides": {role: efa_results.as_dict(side) for role, side in sides.items()},
                    "logs": output.logs,
                    "cleanup_errors": output.cleanup_errors,
                },
                indent=2,
            )
        )
        if not all(check.ok for check in checks):
            raise typer.Exit(1)
        return
    for error in output.cleanup_errors:
        console.print(f"[yellow]not deleted (ends by its deadline and TTL): {error}[/yellow]")
    nodes = ", ".join(f"{role} {node}" for role, node in output.nodes.items())
    _report(checks, False, f"EFA between {nodes}")


@app.command("cost")
def cost_command(
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """Hourly and daily on-demand cost of the configuration (AWS Price List API)."""
    settings = _settings(config, context)
    pricing = boto3.client("pricing", region_name="us-east-1")  # the API's home region
    lines = cost.cost_lines(pricing, settings)
    total = sum(line.per_hour for line in lines)
    if as_json:
        print(
            json.dumps(
                {
                    "lines": [line.as_dict() for line in lines],
                    "per_hour": total,
                    "per_day": total * cost.HOURS_PER_DAY,
                },
                indent=2,
            )
        )
        return
    table = Table(title=f"Cost of {settings.prefix} in {settings.region} (USD)")
    for column, justify in (
        ("item", "left"),
        ("qty", "right"),
        ("per hour", "right"),
        ("per day", "right"),
        ("note", "left"),
    ):
        table.add_column(column, justify=justify)
    for line in lines:
        table.add_row(
            line.item,
            str(line.quantity),
            f"{line.per_hour:,.2f}",
            f"{line.per_hour * cost.HOURS_PER_DAY:,.2f}",
            line.note,
        )
    table.add_row("total", "", f"{total:,.2f}", f"{total * cost.HOURS_PER_DAY:,.2f}", "")
    console.print(table)


def _account(settings: Settings) -> str | None:
    """The deployment's account, asked of STS only when the image cache needs it."""
    if not settings.serving.image_cache.enabled or settings.account:
        return settings.account
    return boto3.client("sts", region_name=settings.region).get_caller_identity()["Account"]


def _stack_output(settings: Settings, key: str) -> str:
    stack = settings.stack_name("serving")
    outputs = (
        boto3.client("cloudformation", region_name=settings.region)
        .describe_stacks(StackName=stack)["Stacks"][0]
        .get("Outputs", [])
    )
    for output in outputs:
        if output["OutputKey"] == key:
            return output["OutputValue"]
    console.print(f"[red]{stack} has no output {key}; pass --url[/red]")
    raise typer.Exit(2)


def main() -> Any:
    """Every failure that reaches here is AWS or Kubernetes saying no (no credentials, no
    kubeconfig, access denied, an endpoint out of reach): one line and exit 1, not a traceback."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return app()
    except (BotoCoreError, ClientError) as error:
        console.print(f"[red]pdctl: AWS: {error}[/red] (credentials: AWS_PROFILE or aws sso login)")
        raise SystemExit(1) from None
    except Exception as error:
        if type(error).__module__.startswith("kubernetes"):
            console.print(f"[red]pdctl: Kubernetes: {type(error).__name__}: {error}[/red]")
            raise SystemExit(1) from None
        raise


if __name__ == "__main__":
    main()
