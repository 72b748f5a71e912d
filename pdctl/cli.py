"""`pdctl`: preflight before deploy, proof after deploy that KV crossed EFA, KV sizing, bench, cost.

Every command reads the same configuration as `cdk synth` (cdk.json, `--config`, `-c`), prints a
table for people or JSON for machines (`--json`) on stdout, and errors on stderr (JSON under
`--json`). Exit codes: 0 every check passed; 1 a check failed; 2 the check could not run or
could not decide (bad options or files, no credentials or kubeconfig, nothing reachable,
evidence that cannot tell).

The SDKs (boto3, kubernetes) and the configuration model load inside the commands that use them,
so that `pdctl --help` answers at once.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.table import Table

from pdctl import aws_errors, output, verify
from pdctl.checks import Check, exit_code
from pdctl.output import CannotRunError, emit_json, fail, plain, styled

if TYPE_CHECKING:
    from app_config import Settings
    from pdctl.bench_job import BenchSummary
    from pdctl.prefix_reuse import CacheCounts

app = typer.Typer(
    help=__doc__.splitlines()[0], no_args_is_help=True, pretty_exceptions_enable=False
)
console = output.stdout
F = TypeVar("F", bound=Callable[..., Any])

ConfigOption = Annotated[str | None, typer.Option("--config", help="YAML configuration file")]
ContextOption = Annotated[list[str], typer.Option("-c", "--context", help="key=value override")]
JsonOption = Annotated[
    bool,
    typer.Option("--json", help="machine-readable output (errors too)", callback=output.json_mode),
]
CREDENTIALS_HINT = aws_errors.CREDENTIALS_HINT


def _aws_config() -> Any:
    """Every AWS call bounded: botocore's defaults wait 60 s per read and retry."""
    from botocore.config import Config

    return Config(connect_timeout=10, read_timeout=30, retries={"max_attempts": 3})


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"pdctl {version('pd-llm-serving')}")
        except PackageNotFoundError:
            print("pdctl (not installed: `make synth` installs it into the venv)")
        raise typer.Exit(0)


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_version, help="print the version"),
    ] = False,
) -> None:
    """The operator's companion to the CDK app; reads the same configuration."""


def guarded(command: F) -> F:
    """Every way a command can end without a verdict, as one line on stderr and exit code 2:
    no credentials, an AWS or Kubernetes refusal, an answer that cannot be read."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )
        from botocore.parsers import ResponseParserError

        try:
            return command(*args, **kwargs)
        except typer.Exit:
            raise
        except CannotRunError as error:
            fail(str(error), error.hint)
        except NoCredentialsError as error:
            hint = CREDENTIALS_HINT
            if command.__name__ == "cost_command":
                hint += "; or `pdctl cost --prices catalog` for list prices without an account"
            fail(f"AWS: {error}", hint)
        except ClientError as error:
            # By class (pdctl/aws_errors.py): credentials advice only for credential errors.
            said = f"{aws_errors.code(error)}: {aws_errors.message(error)}"
            fail(f"AWS {error.operation_name}: {said}", aws_errors.hint(error))
        except ResponseParserError as error:
            fail(
                f"AWS answered something that is not its API's answer ({error})",
                "check AWS_ENDPOINT_URL, proxies and the region",
            )
        except (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError) as error:
            fail(
                f"AWS out of reach: {error}",
                "check the network, the region and AWS_ENDPOINT_URL (a proxy or endpoint override)",
            )
        except BotoCoreError as error:  # the SDK's own: a profile not found, a bad config file
            fail(f"AWS SDK: {error}", f"{CREDENTIALS_HINT}; check AWS_PROFILE and ~/.aws/config")
        except Exception as error:
            if type(error).__module__.startswith(("kubernetes", "urllib3")):
                from pdctl import kube

                reason = kube.describe_api_error(error, None)
                fail(f"Kubernetes: {reason}", reason.hint or kube.kubeconfig_hint(None))
            if os.environ.get("PDCTL_DEBUG"):
                raise
            fail(
                f"unexpected {type(error).__name__}: {error}",
                "PDCTL_DEBUG=1 shows the traceback; please report it with the command",
            )

    return run  # type: ignore[return-value]


def _settings(config: str | None, context: list[str]) -> Settings:
    from app_config import ConfigError, load_settings
    from app_config.cli_context import cli_context

    try:
        return load_settings(cli_context(config, context))
    except (ConfigError, ValueError, OSError) as error:
        fail(f"configuration: {error}", "fix the setting named; `cdk synth` reports the same")


def _report(checks: list[Check], as_json: bool, title: str) -> None:
    if as_json:
        emit_json([check.as_dict() for check in checks])
    else:
        table = Table(title=plain(title))
        for column in ("check", "result", "detail", "fix"):
            table.add_column(column)
        for check in checks:
            mark = (
                styled("pass", "green")
                if check.ok
                else styled("CANNOT TELL", "yellow")
                if check.inconclusive
                else styled("FAIL", "red")
            )
            table.add_row(styled(check.name), mark, styled(check.detail), styled(check.fix))
        console.print(table)
    code = exit_code(checks)
    if code:
        raise typer.Exit(code)


@app.command("preflight")
@guarded
def preflight_command(
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006 (typer reads the default)
    window_hours: Annotated[int, typer.Option(min=0, help="reservations must outlast this")] = 24,
    as_json: JsonOption = False,
) -> None:
    """Read-only checks of the target account before deploy.

    Capacity, quota, reservations, bootstrap, the image, leftover log groups."""
    from datetime import timedelta

    import boto3

    from pdctl import preflight

    settings = _settings(config, context)
    session = boto3.Session(region_name=settings.region)
    clients = {name: session.client(name, config=_aws_config()) for name in preflight.CLIENTS}
    mirror_region = _image_registry_region(settings)
    if mirror_region != settings.region:
        clients[preflight.MIRROR_CLIENT] = session.client(
            "ecr", region_name=mirror_region, config=_aws_config()
        )
    with output.stderr.status("Checking the account...", spinner="dots"):
        checks = preflight.run_preflight(clients, settings, window=timedelta(hours=window_hours))
    _report(checks, as_json, f"Preflight for {settings.region}")


class Side(StrEnum):
    prefill = "prefill"
    decode = "decode"


@app.command("plan")
@guarded
def plan_command(
    model_config: Annotated[
        str | None,
        typer.Option(
            help="the model's config.json (or its folder), or a Hugging Face model id "
            "(owner/name); default: serving.model.id"
        ),
    ] = None,
    input_tokens: Annotated[int, typer.Option(min=1, max=10_000_000)] = 4096,
    output_tokens: Annotated[int, typer.Option(min=1, max=10_000_000)] = 512,
    side: Annotated[
        Side, typer.Option(help="whose nodes, parallelism and engine options to size")
    ] = Side.prefill,
    instance_type: Annotated[str | None, typer.Option(help="default: the side's nodes'")] = None,
    tensor_parallel: Annotated[
        int | None, typer.Option(min=1, max=64, help="default: the side's TP")
    ] = None,
    data_parallel: Annotated[
        int | None,
        typer.Option(min=1, max=1024, help="DP ranks per replica; default: the side's"),
    ] = None,
    expert_parallel: Annotated[
        bool | None,
        typer.Option(
            "--expert-parallel/--no-expert-parallel", help="default: the side's expert_parallel"
        ),
    ] = None,
    eplb_redundant_experts: Annotated[
        int | None,
        typer.Option(
            min=0, max=4096, help="EPLB's extra expert copies (enables EPLB); default: the side's"
        ),
    ] = None,
    kv_cache_dtype: Annotated[
        str | None, typer.Option(help="auto, bfloat16, fp8, fp8_ds_mla, ...; default: the side's")
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(min=1, max=10_000_000, help="default: serving.max_model_len"),
    ] = None,
    versus: Annotated[
        str | None,
        typer.Option(
            help="another configuration file whose same side to compare with (its own layout; "
            "e.g. examples/deepseek-v3-pd-one-node.yaml against examples/deepseek-v3-pd.yaml)"
        ),
    ] = None,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """KV-cache sizing and a verdict on disaggregation for a model, on one side.

    KV bytes per token (GQA or MLA) and per request, EFA vs TCP transfer time, memory per GPU
    (quantized weights, experts spread by expert parallel), KV tokens per DP rank and replica,
    an expert-parallel group's all-to-all and EPLB traffic; the options are checked by the
    configuration's own rules. Exits 1 when the model does not fit."""
    from catalog.model_architecture import UnsupportedModelError
    from pdctl import kv_plan

    settings = _settings(config, context)
    model_config = model_config or settings.serving.model.id
    role = side.value
    try:
        model = kv_plan.load_model_config(model_config)
    except OSError as error:
        fail(f"{model_config}: cannot read it: {error}")
    except UnsupportedModelError as error:
        fail(f"{model_config}: cannot size this model: {error}")
    options = {
        "tensor_parallel": tensor_parallel,
        "data_parallel": data_parallel,
        "expert_parallel": expert_parallel,
        "eplb_redundant_experts": eplb_redundant_experts,
    }
    sizing = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    planned = _plan_side(
        settings, role, model, model_config, instance_type, options, kv_cache_dtype,
        max_model_len, sizing,
    )  # fmt: skip
    other = None
    if versus is not None:
        other = _plan_side(
            _settings(versus, context), role, model, model_config, None, {}, kv_cache_dtype,
            max_model_len, sizing,
        )  # fmt: skip
    result, instance, tp, pp = planned
    if as_json:
        body = _plan_json(role, planned)
        if other is not None:
            body["versus"] = {"config": versus} | _plan_json(role, other)
        emit_json(body)
    else:
        _print_plan(result, model_config, instance, role, tp, pp, input_tokens)
        if other is not None:
            _print_comparison(config or "this configuration", planned, versus or "", other)
    if not result.fits:
        raise typer.Exit(output.EXIT_CHECK_FAILED)


def _plan_json(role: str, planned: tuple[Any, Any, int, int]) -> dict[str, Any]:
    result, instance, tp, pp = planned
    return (
        {"side": role, "instance_type": instance.name, "tensor_parallel": tp}
        | {"pipeline_parallel": pp}
        | result.as_dict()
    )


def _plan_side(
    settings: Settings,
    role: str,
    model: dict[str, Any],
    model_config: str,
    instance_type: str | None,
    options: dict[str, Any],
    kv_cache_dtype: str | None,
    max_model_len: int | None,
    sizing: dict[str, int],
) -> tuple[Any, Any, int, int]:
    """One side's plan: the options through the configuration's rules (plan_layout.py), then
    the model's rules of the layout, the same functions synth applies
    (app_config/rules/model_parallel.py: heads over TP, experts for DP, EP and EPLB, the
    model class for PP)."""
    from app_config import ConfigError
    from app_config.rules.model_parallel import side_findings
    from catalog import model_config_file
    from catalog.instances import CATALOG
    from catalog.model_architecture import UnsupportedModelError, model_shape
    from pdctl import kv_plan
    from pdctl.plan_layout import side_with_options
    from serving_manifests.serve_config import reads_only_local_experts

    chosen = instance_type or settings.side(role).nodes.instance_type
    if chosen not in CATALOG:
        fail(f"--instance-type {chosen}: not in the catalog", f"valid: {', '.join(CATALOG)}")
    try:
        settings = side_with_options(settings, role, instance_type=chosen, **options)
    except ConfigError as error:
        fail(
            f"{role}: {'; '.join(str(problem) for problem in error.problems)}",
            "`cdk synth` refuses the same; change --tensor-parallel, --data-parallel, "
            "--expert-parallel or --eplb-redundant-experts",
        )
    instance, engine = CATALOG[chosen], settings.serving.engine(role)
    side = settings.side(role)
    tp, pp = side.tensor_parallel, side.pipeline_parallel
    cache_dtype = kv_cache_dtype or str(
        settings.serving.engine_options_for(role).get("kv_cache_dtype") or "auto"
    )
    overrides = settings.serving.engine_options_for(role).get("hf_overrides")
    try:
        model = model_config_file.as_engine_reads(model, overrides)  # synth's reading
        shape = model_shape(model, cache_dtype)
    except UnsupportedModelError as error:
        fail(f"{model_config}: cannot size this model: {error}")
    refused = side_findings(model, model_config, side)
    if refused:
        fail(
            "; ".join(f"{finding} [{finding.code}]" for finding in refused),
            "`cdk synth` refuses the same for this model; change --tensor-parallel, "
            "--data-parallel, --expert-parallel or --eplb-redundant-experts (pipeline "
            "parallel: the configuration's pipeline_parallel_size)",
        )
    result = kv_plan.plan(
        shape,
        instance,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        data_parallel=engine.data_parallel_size,
        expert_parallel=engine.expert_parallel,
        eplb=engine.eplb.enabled,
        redundant_experts=engine.eplb.num_redundant_experts,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        max_model_len=max_model_len or settings.serving.max_model_len,
        in_node=side.shared,
        ep_weight_filter=shape.experts > 0
        and reads_only_local_experts(
            engine, {"tensor_parallel_size": tp, **settings.serving.engine_options_for(role)}
        ),
        **sizing,
    )
    return result, instance, tp, pp


def _print_comparison(
    name: str, planned: tuple[Any, Any, int, int], other_name: str, other: tuple[Any, Any, int, int]
) -> None:
    """The figures that decide one node against two (docs/architecture.md, "One node or
    two"), side by side."""
    table = Table(title=plain(f"{name} against {other_name}"))
    table.add_column("figure")
    table.add_column(styled(name), justify="right")
    table.add_column(styled(other_name), justify="right")
    mib, gib = 2**20, 2**30

    def moe(result: Any, key: str, scale: float, unit: str) -> str:
        return "-" if result.moe is None else f"{getattr(result.moe, key) / scale:.1f} {unit}"

    figures: list[tuple[str, Callable[[Any], str]]] = [
        ("GPUs and nodes per replica", lambda r: f"{r.gpus_per_replica} on {r.nodes_per_replica}"),
        ("routed experts per GPU per MoE layer", lambda r: f"{r.experts_per_gpu:g}"),
        ("weights per GPU", lambda r: f"{r.weights_bytes_per_gpu / gib:.1f} GiB"),
        ("KV tokens per DP rank", lambda r: f"{r.kv_tokens_per_dp_rank:,}"),
        ("KV tokens per replica", lambda r: f"{r.kv_tokens_per_replica:,}"),
        (
            "all-to-all per token over NVLink",
            lambda r: moe(r, "nvlink_bytes_per_token", mib, "MiB"),
        ),
        ("all-to-all per token over EFA", lambda r: moe(r, "efa_bytes_per_token", mib, "MiB")),
        ("EPLB stall per rebalance", lambda r: moe(r, "eplb_stall_seconds", 1e-3, "ms")),
        ("a rank's failure restarts", lambda r: f"{r.data_parallel} ranks"),
    ]
    for figure, value in figures:
        table.add_row(styled(figure), styled(value(planned[0])), styled(value(other[0])))
    console.print(table)


def _print_plan(
    result: Any, model_config: str, instance: Any, role: str, tp: int, pp: int, input_tokens: int
) -> None:
    from pdctl import kv_plan

    layout = f"DP {result.data_parallel} x TP {tp}" + (f" x PP {pp}" if pp > 1 else "")
    if result.expert_parallel:
        layout += " with EP"
    title = f"{model_config} on {instance.name}, {role}: {layout}"
    table = Table(title=plain(title))
    table.add_column("figure")
    table.add_column("value", justify="right")
    attention = "MLA latent" if result.attention == "mla" else "GQA"
    gib = 2**30
    rows = [
        (
            f"KV bytes per token ({attention}, {result.kv_cache_dtype})",
            f"{result.kv_bytes_per_token:,}",
        ),
        ("KV bytes per token per GPU", f"{result.kv_bytes_per_token_per_gpu:,}"),
        (f"KV bytes per request ({input_tokens} input tokens)", f"{result.kv_bytes_per_request:,}"),
        ("KV bytes per request per GPU", f"{result.kv_bytes_per_request_per_gpu:,}"),
        (
            f"transfer inside the node over {result.hand_off_path} (shared nodes: each GPU over "
            f"its own {result.hand_off_gbytes_per_s_per_gpu:g} GB/s, x "
            f"{kv_plan.IN_NODE_EFFICIENCY})",
            f"{result.transfer_seconds_hand_off * 1000:.2f} ms",
        )
        if result.hand_off_path != "EFA"
        else (
            f"transfer over EFA (each GPU over its own {result.efa_gbps_per_gpu:g} Gbps of the "
            f"node's {instance.efa_bandwidth_gbps:,}, x {kv_plan.EFA_EFFICIENCY})",
            f"{result.transfer_seconds_efa * 1000:.2f} ms",
        ),
        (
            f"transfer over TCP ({kv_plan.TCP_SINGLE_FLOW_GBPS:.0f} Gbps flow)",
            f"{result.transfer_seconds_tcp * 1000:.1f} ms",
        ),
        ("prefill compute (estimate)", f"{result.prefill_seconds * 1000:.1f} ms"),
        ("weight precision (quantization_config)", result.weight_precision),
        ("weights per GPU", f"{result.weights_bytes_per_gpu / gib:.1f} GiB"),
        (
            "model files each rank reads at every group start",
            f"{result.checkpoint_bytes_read_per_rank / gib:.1f} GiB",
        ),
    ]
    if result.experts_per_gpu:
        split = "whole, EP" if result.expert_parallel else "sliced, TP x DP"
        rows.append(
            (
                f"routed experts per GPU per MoE layer ({split})",
                f"{result.experts_per_gpu:g} ({result.expert_weights_bytes_per_gpu / gib:.1f} GiB)",
            )
        )
    nodes = result.nodes_per_replica
    rows += [
        ("KV budget per GPU", f"{result.kv_budget_bytes_per_gpu / gib:.1f} GiB"),
        ("KV tokens per DP rank", f"{result.kv_tokens_per_dp_rank:,}"),
        (
            f"KV tokens per replica ({result.gpus_per_replica} GPUs, {nodes} node"
            f"{'s' if nodes > 1 else ''})",
            f"{result.kv_tokens_per_replica:,}",
        ),
        ("concurrent sequences per replica", f"{result.max_concurrent_sequences:,}"),
    ]
    if result.max_model_len is not None:
        rows.append(
            (
                f"sequences at max_model_len {result.max_model_len:,} per replica",
                f"{result.sequences_at_max_model_len:,}",
            )
        )
    rows += _moe_rows(result.moe)
    for figure, value in rows:
        table.add_row(styled(figure), styled(value))
    console.print(table)
    style = "green" if result.pays_off else "yellow" if result.fits else "red"
    console.print(styled(result.verdict, style))


def _moe_rows(moe: Any) -> list[tuple[str, str]]:
    """The expert-parallel group's traffic (pdctl/moe_traffic.py): what decides one node against
    several (docs/architecture.md, "One node or two")."""
    if moe is None:
        return []
    mib = 2**20
    rows = [
        (
            f"all-to-all per token, all MoE layers (to {moe.ranks - 1} other ranks)",
            f"{moe.bytes_per_token / mib:.1f} MiB",
        ),
        ("  of it over NVLink", f"{moe.nvlink_bytes_per_token / mib:.1f} MiB"),
        (
            f"  of it over EFA between {moe.nodes} nodes (at least)"
            if moe.nodes > 1
            else "  of it over EFA (one node: none)",
            f"{moe.efa_bytes_per_token / mib:.1f} MiB",
        ),
    ]
    if moe.eplb_bytes_per_rank:
        rows += [
            (
                "EPLB rebalance: expert weights one rank receives (at most)",
                f"{moe.eplb_bytes_per_rank / 2**30:.1f} GiB",
            ),
            ("  of it over EFA", f"{moe.eplb_efa_bytes_per_rank / 2**30:.1f} GiB"),
            (
                "  every rank stalls (use_async false: inside one engine step)",
                f"{moe.eplb_stall_seconds * 1000:,.0f} ms",
            ),
        ]
    return rows


@app.command("verify")
@guarded
def verify_command(
    url: Annotated[
        str | None, typer.Option(help="endpoint; default: the EndpointUrl output")
    ] = None,
    metrics_url: Annotated[
        list[str], typer.Option(help="decode metrics URLs; default: through the Kubernetes API")
    ] = [],  # noqa: B006
    prefill_metrics_url: Annotated[
        list[str],
        typer.Option(
            help="prefill metrics URLs, for the prefix-reuse check; default: through the "
            "Kubernetes API, unless --metrics-url is given (then the check is left out)"
        ),
    ] = [],  # noqa: B006
    metrics_port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="default: the workers' metrics port")
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            max=3600,
            help="seconds any one network call may take as a whole, a streamed completion included",
        ),
    ] = verify.DEFAULT_TIMEOUT_SECONDS,
    metrics_wait: Annotated[
        float,
        typer.Option(
            min=0,
            max=3600,
            help="seconds to wait for the decode metrics to show the completion's transfer; "
            "shorter than --metrics-interval plus 1, a transfer seen before then is taken as is",
        ),
    ] = verify.METRICS_EXPORT_WAIT_SECONDS,
    metrics_interval: Annotated[
        float,
        typer.Option(
            min=0,
            max=3600,
            help="seconds between a Ray worker's metrics reports (RAY_metrics_report_interval_ms "
            "/ 1000; Ray's default 10): a transfer counts as the completion's only in a reading "
            "this long after it ended",
        ),
    ] = verify.METRICS_REPORT_INTERVAL_SECONDS,
    slow_transfer_ms: Annotated[
        float,
        typer.Option(min=0.1, help="a mean KV transfer slower than this points at the fabric"),
    ] = verify.SLOW_TRANSFER_SECONDS * 1000,
    ray_dashboard_url: Annotated[
        str | None,
        typer.Option(
            help="the Ray dashboard (RayDashboardCommand's port-forward): then each DP rank's "
            "engine and worker nodes are checked; the token is read from RAY_AUTH_TOKEN"
        ),
    ] = None,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """List models, stream one completion (TTFT, ITL), prove KV moved over NIXL, and send one
    prompt twice to see prefill's prefix cache reuse it."""
    from serving_manifests.names import METRICS_PORT

    settings = _settings(config, context)
    base = url or _stack_output(settings, "EndpointUrl")
    # Port-forwards to decode only: prefill's metrics have no address to be read from.
    read_prefill = (
        _prefill_cache_reader(settings, prefill_metrics_url, metrics_port or METRICS_PORT, timeout)
        if prefill_metrics_url or not metrics_url
        else None
    )
    waits = verify.MetricsWaits(metrics_wait, metrics_interval)
    try:
        checks, ended = _verify(
            settings,
            base,
            metrics_url,
            metrics_port or METRICS_PORT,
            timeout,
            waits,
            slow_transfer_ms,
        )
        if checks[0].ok and read_prefill is not None:
            checks.append(_prefix_reuse(settings, base, read_prefill, ended, timeout, waits))
        if ray_dashboard_url:
            checks += _rank_placement(settings, ray_dashboard_url, timeout)
    except verify.VerifyError as error:
        fail(f"verify {base}: {error}", code=output.EXIT_CHECK_FAILED)
    except CannotRunError as error:
        fail(f"verify {base}: {error}", error.hint)
    _report(checks, as_json, f"Verify {base}")


def _metrics_pages(
    settings: Settings, urls: list[str], port: int, timeout: float, role: str
) -> list[str]:
    """The metrics pages of one side's workers: the URLs given, else every pod of the side
    through the Kubernetes API."""
    if urls:
        return [verify.fetch_text(url, timeout) for url in urls]
    return verify.worker_metrics_from_kubernetes(settings, port, timeout, role=role)


def _verify(
    settings: Settings,
    base: str,
    metrics_url: list[str],
    metrics_port: int,
    timeout: float,
    waits: verify.MetricsWaits,
    slow_transfer_ms: float,
) -> tuple[list[Check], float]:
    """The model listed, one streamed completion and its KV hand-off; with them the monotonic
    time the completion ended, from which the next check reads complete metrics pages."""
    from pdctl.checks import failed, passed, undecided

    model = settings.serving.model.id
    models = verify.list_models(base, timeout)
    if model not in models:
        listed = ", ".join(models) or "no model"
        return [
            failed(f"model {model} listed", listed, "wait for the RayService to turn healthy")
        ], time.monotonic()
    checks = [passed(f"model {model} listed", ", ".join(models))]

    def read_metrics() -> verify.TransferEvidence:
        return verify.transfer_evidence(
            _metrics_pages(settings, metrics_url, metrics_port, timeout, "decode")
        )

    kv_name = f"KV moved from prefill to decode over NIXL/{settings.serving.kv_transfer.backend}"
    before, unreadable = None, None
    try:
        before = read_metrics()
    except (verify.EvidenceError, CannotRunError) as error:
        unreadable = error
    with output.stderr.status("Streaming one chat completion...", spinner="dots"):
        timing = verify.stream_one_completion(base, model, "Say hello.", timeout)
    ended = time.monotonic()
    checks.append(
        passed(
            "one streamed completion",
            f"{timing.tokens} chunks, TTFT {timing.time_to_first_token * 1000:.0f} ms, "
            f"mean ITL {timing.mean_itl * 1000:.1f} ms, finish_reason {timing.finish_reason}",
        )
    )
    if before is not None:
        try:
            evidence = verify.await_transfers(
                read_metrics, before, waits.wait_seconds, waits.complete_from(ended)
            )
        except (verify.EvidenceError, CannotRunError) as error:
            unreadable = error
    if unreadable is not None:
        hint = getattr(unreadable, "hint", "") or (
            "point --metrics-url at the decode workers' metrics port, through a port-forward"
        )
        checks.append(undecided(f"{kv_name}: cannot tell", str(unreadable), hint))
        return checks, ended
    checks.append(
        verify.kv_verdict(evidence, settings.serving.kv_transfer.backend, slow_transfer_ms / 1000)
    )
    return checks, ended


def _prefill_cache_reader(
    settings: Settings, urls: list[str], port: int, timeout: float
) -> Callable[[], CacheCounts]:
    """Reads prefill's prefix-cache counters, summed over its workers' metrics pages."""
    from pdctl import prefix_reuse

    def read() -> CacheCounts:
        return prefix_reuse.cache_counts(_metrics_pages(settings, urls, port, timeout, "prefill"))

    return read


def _prefix_reuse(
    settings: Settings,
    base: str,
    read: Callable[[], CacheCounts],
    ended: float,
    timeout: float,
    waits: verify.MetricsWaits,
) -> Check:
    """The same prompt twice, prefill's prefix-cache counters read before, after the first and
    after the second (pdctl/prefix_reuse.py judges them). The first reading waits until the
    workers have reported since verify's own completion ``ended``: Ray exports each worker's
    counters on its own tick, and that completion's lookup (or an earlier client's), counted
    late into the first prompt's, would look like other traffic."""
    from pdctl import prefix_reuse
    from pdctl.checks import undecided

    engine = settings.serving.prefill
    if prefix_reuse.prefix_caching_off(settings.serving.engine_options_for("prefill")):
        return prefix_reuse.not_checked(
            "prefill's engine options set enable_prefix_caching false: every prompt is computed"
        )

    model = settings.serving.model.id
    prompt = prefix_reuse.repeated_prompt(settings.serving.kv_transfer.block_size)
    try:
        with output.stderr.status("Sending one prompt twice...", spinner="dots"):
            before = read()  # pages that cannot be read at all end the check here, unwaited
            wait = waits.complete_from(ended) - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, waits.wait_seconds))
                before = read()
            verify.stream_one_completion(
                base, model, prompt, timeout, max_tokens=prefix_reuse.ANSWER_TOKENS
            )
            first = prefix_reuse.await_counts(
                read, prefix_reuse.moved_since(before), waits.wait_seconds
            )
            verify.stream_one_completion(
                base, model, prompt, timeout, max_tokens=prefix_reuse.ANSWER_TOKENS
            )
            tokens = first.queries - before.queries
            second = prefix_reuse.await_counts(
                read,
                lambda now: (
                    now.queries - first.queries >= tokens
                    or now.queries < first.queries
                    or now.sources != first.sources
                ),
                waits.wait_seconds,
            )
    except (verify.EvidenceError, CannotRunError) as error:
        hint = getattr(error, "hint", "") or (
            "point --prefill-metrics-url at the prefill workers' metrics port, through a "
            "port-forward"
        )
        return undecided(f"{prefix_reuse.NAME}: cannot tell", str(error), hint)
    return prefix_reuse.reuse_verdict(
        before,
        first,
        second,
        settings.serving.kv_transfer.block_size,
        engine.request_router,
        engine.max_replicas,
    )


def _rank_placement(settings: Settings, dashboard_url: str, timeout: float) -> list[Check]:
    """Each DP side's ranks: engine core and GPU workers on one node (pdctl/rank_placement.py)."""
    from app_config.node_labels import GPU_ROLES
    from pdctl import rank_placement
    from pdctl.checks import undecided

    sides = {}
    for role in GPU_ROLES:
        side = settings.side(role)
        tp, pp = side.tensor_parallel, side.pipeline_parallel
        ranks = settings.serving.engine(role).data_parallel_size
        if ranks > 1:
            sides[role] = (ranks, tp * pp)
    if not sides:
        return []
    try:
        groups, actors = rank_placement.read_state(
            dashboard_url, os.environ.get("RAY_AUTH_TOKEN"), timeout
        )
    except rank_placement.PlacementEvidenceError as error:
        return [
            undecided(
                "DP ranks' engine cores on their GPUs' nodes",
                str(error),
                "an admin's RayDashboardCommand port-forward, with RAY_AUTH_TOKEN set to the "
                "cluster's Ray token",
            )
        ]
    return rank_placement.placement_checks(sides, groups, actors)


@app.command("bench")
@guarded
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
    """Benchmark the endpoint with `vllm bench serve` in a Job.

    From the Ray LLM image, next to the endpoint; exits 1 unless every request completed."""
    from pdctl import bench_job, bench_run, kube
    from pdctl.cluster_jobs import ClusterJobs
    from serving_manifests.image import pod_image
    from serving_manifests.names import SERVE_PORT, endpoint_service_name

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
    kube.load_kubeconfig(settings)
    manifest = bench_job.job_manifest(
        name, serving.namespace, pod_image(settings, _account(settings)), parameters
    )
    with output.stderr.status(f"Job {name}: running vllm bench serve...", spinner="dots") as shown:
        outcome = bench_run.run(
            ClusterJobs(settings),
            manifest,
            deadline_seconds=timeout_minutes * 60,
            progress=lambda text: shown.update(plain(text)),
        )
    if not outcome.succeeded:
        fail(
            f"Job {name} failed; the end of its log: {outcome.logs[-1500:]}",
            "read the whole log with `kubectl -n "
            f"{serving.namespace} logs job/{name}`; run pdctl verify",
            code=output.EXIT_CHECK_FAILED,
        )
    try:
        result = bench_job.result_from_logs(outcome.logs)
        summary = bench_job.summarize(result)
    except bench_job.BenchResultError as error:
        fail(f"Job {name}: {error}", f"kubectl -n {serving.namespace} logs job/{name}")
    try:
        save.write_text(json.dumps(result, indent=2, default=str))
    except OSError as error:
        fail(f"--save {save}: cannot write the result ({error.strerror or error})")
    verdict = bench_job.verdict(summary)
    _print_bench(summary, verdict, as_json, save)
    if not verdict.ok:
        raise typer.Exit(output.EXIT_CHECK_FAILED)


def _print_bench(summary: BenchSummary, verdict: Check, as_json: bool, saved: Path) -> None:
    if as_json:
        emit_json({**summary.as_dict(), "check": verdict.as_dict(), "saved": str(saved)})
        return
    if summary.latencies_ms:
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
            f"tokens/s over {summary.duration_s:.0f} s; result saved to {plain(saved)}"
        )
    if not verdict.ok:
        output.stderr.print(styled(f"FAIL: {verdict.detail}. {verdict.fix}", "red"))


@app.command("image")
@guarded
def image_command(
    registry: Annotated[
        bool, typer.Option(help="ask the region's DLC registry for the tag's digest now")
    ] = True,
    from_cluster: Annotated[
        bool, typer.Option(help="read the digests the Ray pods run (kubectl context)")
    ] = False,
    scan_report: Annotated[
        bool,
        typer.Option(
            help="ECR's or Amazon Inspector's findings (needs serving.image_cache or an ECR "
            "serving.image_mirror)"
        ),
    ] = False,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """The pinned image, its versions, the digest the registry holds and the pods run."""
    import boto3
    from botocore.config import Config

    from pdctl import image
    from serving_manifests.image import pod_image

    settings = _settings(config, context)
    ecr = (
        boto3.client(
            "ecr",
            region_name=_image_registry_region(settings),
            config=Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 2}),
        )
        if registry
        else None
    )
    pod_images = _pod_image_ids(settings) if from_cluster else []
    account = _account(settings)
    result = image.report(settings, ecr, pod_images, pod_image(settings, account), account=account)
    scan = _scan_report(settings, ecr, account) if scan_report else None
    # "cannot tell" (the registry gave no digest) and "cannot judge the scan" could not decide.
    undecided = result.inconclusive or bool(scan and scan.inconclusive)
    if as_json:
        emit_json({**result.as_dict(), "scan": scan.as_dict() if scan else None})
        if undecided:
            raise typer.Exit(output.EXIT_CANNOT_RUN)
        return
    table = Table(title=f"Ray LLM image in {settings.region}")
    table.add_column("item")
    table.add_column("value")
    rows = [("tag", result.tag), ("pods pull", result.uri), *result.versions.items()]
    rows.append(("pinned digest", result.pinned_digest or "none (by tag)"))
    rows.append(("registry digest now", result.registry_digest or f"? ({result.registry_error})"))
    if result.pinned_in_cache is not None:
        rows.append(("pinned build in cache", "yes" if result.pinned_in_cache else "no"))
    if from_cluster:
        rows.append(("running digests", ", ".join(result.running_digests) or "no Ray pod found"))
    for item, value in rows:
        table.add_row(styled(item), styled(value))
    console.print(table)
    console.print(styled(result.verdict))
    from catalog.ray_llm_image import NEWER_RAYS

    newer = " or ".join(NEWER_RAYS)
    console.print(styled(f"{result.newest}. A tag on Ray {newer} would need:"))
    for step in result.newer_ray_move:
        console.print(styled(f"  - {step}"))
    if scan:
        counts = ", ".join(f"{n} {s.lower()}" for s, n in scan.counts.items()) or "none"
        console.print(styled(f"scan of {scan.repository}: {scan.status}; findings: {counts}"))
        console.print(styled(scan.verdict))
    if undecided:
        raise typer.Exit(output.EXIT_CANNOT_RUN)


def _scan_report(settings: Settings, ecr: Any, account: str | None) -> Any:
    from pdctl import scan_report
    from serving_manifests.image import mirror_repository

    mirror = mirror_repository(settings)
    if mirror and mirror.ecr and ecr is not None:
        return scan_report.scan_summary(ecr, settings, mirror.ecr.account, mirror.ecr.name)
    if mirror or not settings.serving.image_cache.enabled or ecr is None or not account:
        fail(
            "--scan-report reads the scan of a copy you own: it needs serving.image_cache."
            "enabled or an ECR serving.image_mirror (AWS's DLC registry is another account's, "
            "and no AWS API reads another registry) and the registry (not --no-registry)"
        )
    return scan_report.scan_summary(ecr, settings, account)


def _image_registry_region(settings: Settings) -> str:
    """The region of the ECR registry the pods pull from: an ECR mirror's, else the
    deployment's."""
    from serving_manifests.image import mirror_repository

    mirror = mirror_repository(settings)
    return mirror.ecr.region if mirror and mirror.ecr else settings.region


def _pod_image_ids(settings: Settings) -> list[str]:
    from pdctl import kube
    from pdctl.http_call import within

    kube.load_kubeconfig(settings)

    def read() -> Any:
        from kubernetes import client

        return client.CoreV1Api().list_namespaced_pod(
            settings.serving.namespace,
            label_selector=f"llm-serving/rayservice={settings.serving.name}",
            _request_timeout=30,
        )

    try:
        pods = within(60, read, "listing the Ray pods")
    except TimeoutError as error:
        raise CannotRunError(str(error), kube.kubeconfig_hint(settings)) from None
    except Exception as error:
        raise kube.describe_api_error(error, settings) from None
    return [
        status.image_id
        for pod in pods.items
        for status in (pod.status.container_statuses or [])
        if status.image_id
    ]


@app.command("efa-check")
@guarded
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
    """Every EFA device of a prefill and a decode node, and a ping-pong over each device pair on
    the efa fabric, from the Ray LLM image, judged against the catalog's line rate."""
    from pdctl import efa_jobs, efa_results, efa_run, kube
    from pdctl.cluster_jobs import ClusterJobs

    settings = _settings(config, context)
    if settings.gpu_nodes.shared is not None:
        fail(
            "efa-check measures EFA between a prefill and a decode node, and gpu_nodes.shared "
            "runs both sides on every node: the KV cache never crosses EFA there",
            "`pdctl verify` shows the hand-off inside the node (NIXL/UCX transfers and their "
            "time); docs/architecture.md, 'Prefill and decode on one node'",
        )
    kube.load_kubeconfig(settings)
    plan = efa_jobs.plan_for(
        settings,
        f"pdctl-efa-check-{int(time.time())}",
        {"prefill": prefill_node, "decode": decode_node},
        _account(settings),
    )
    try:
        with output.stderr.status(
            f"Jobs {plan.name}-*: {plan.pairs} EFA device pairs (at most "
            f"{plan.deadline_seconds} s)...",
            spinner="dots",
        ):
            run_output = efa_run.run(ClusterJobs(settings), plan)
    except efa_run.EfaCheckError as error:
        fail(f"efa-check: {error}")
    expected = {
        role: efa_results.expectation(group.instance)
        for role, group in settings.gpu_nodes.groups().items()
    }
    checks, sides, verdicts = efa_results.evaluate(
        run_output.logs, expected, settings.gpu_nodes.efa_check, run_output.unfinished
    )
    if as_json:
        emit_json(
            {
                "nodes": run_output.nodes,
                "checks": [check.as_dict() for check in checks],
                "pairs": [efa_results.verdict_dict(verdict) for verdict in verdicts],
                "sides": {role: efa_results.as_dict(side) for role, side in sides.items()},
                "logs": run_output.logs,
                "cleanup_errors": run_output.cleanup_errors,
            }
        )
        if exit_code(checks):
            raise typer.Exit(exit_code(checks))
        return
    for error in run_output.cleanup_errors:
        output.warn(f"not deleted (Jobs end by their deadline and TTL): {error}")
    nodes = ", ".join(f"{role} {node}" for role, node in run_output.nodes.items())
    _report(checks, False, f"EFA between {nodes}")


class Prices(StrEnum):
    AUTO = "auto"
    API = "api"
    CATALOG = "catalog"


@app.command("cost")
@guarded
def cost_command(
    prices: Annotated[
        Prices,
        typer.Option(
            help="api: the AWS Price List API (credentials); catalog: list prices from "
            "catalog/prices.py, no account needed; auto: api with credentials, else catalog",
        ),
    ] = Prices.AUTO,
    config: ConfigOption = None,
    context: ContextOption = [],  # noqa: B006
    as_json: JsonOption = False,
) -> None:
    """Hourly and daily on-demand cost of the configuration.

    From the AWS Price List API, or the catalog's list prices before an account exists."""
    from pdctl import cost

    settings = _settings(config, context)
    source = _price_source(prices)
    try:
        lines = cost.cost_lines(source, settings)
    except cost.PriceListError as error:
        fail(f"Price List API: {error}", "`pdctl cost --prices catalog` for list prices")
    total, complete = cost.total_per_hour(lines)
    if as_json:
        emit_json(
            {
                "prices": source.label,
                "lines": [line.as_dict() for line in lines],
                "per_hour": total,
                "per_day": total * cost.HOURS_PER_DAY,
                "complete": complete,
            }
        )
        return
    table = Table(title=f"Cost of {plain(settings.prefix)} in {settings.region} (USD)")
    for column, justify in (
        ("item", "left"),
        ("qty", "right"),
        ("per hour", "right"),
        ("per day", "right"),
        ("note", "left"),
    ):
        table.add_column(column, justify=justify)
    for line in lines:
        per_hour = line.per_hour
        table.add_row(
            styled(line.item),
            str(line.quantity),
            "?" if per_hour is None else f"{per_hour:,.2f}",
            "?" if per_hour is None else f"{per_hour * cost.HOURS_PER_DAY:,.2f}",
            styled(line.note),
        )
    prefix = "" if complete else "at least "
    table.add_row(
        "total", "", f"{prefix}{total:,.2f}", f"{prefix}{total * cost.HOURS_PER_DAY:,.2f}", ""
    )
    console.print(table)
    console.print(styled(f"prices: {source.label}"))


def _price_source(choice: Prices) -> Any:
    from pdctl import cost

    if choice == Prices.CATALOG:
        return cost.CatalogPrices()
    import boto3

    session = boto3.Session()
    if choice == Prices.AUTO and session.get_credentials() is None:
        output.warn("no AWS credentials: catalog list prices (--prices api needs credentials)")
        return cost.CatalogPrices()
    # us-east-1: the Price List API's home region
    return cost.ApiPrices(session.client("pricing", region_name="us-east-1", config=_aws_config()))


def _account(settings: Settings) -> str | None:
    """The deployment's account, asked of STS only when the image cache needs it."""
    if not settings.serving.image_cache.enabled or settings.account:
        return settings.account
    import boto3

    sts = boto3.client("sts", region_name=settings.region, config=_aws_config())
    answer = _aws_answer("STS GetCallerIdentity", sts.get_caller_identity)
    account = answer.get("Account") if isinstance(answer, dict) else None
    if not isinstance(account, str):
        raise CannotRunError("STS answered without an account id", CREDENTIALS_HINT)
    return account


def _aws_answer(what: str, call: Callable[[], Any]) -> Any:
    """botocore itself can fail to read an answer that is not the API's (an HTML page from a
    proxy raises KeyError inside its parser): one line naming the call."""
    try:
        return call()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise CannotRunError(
            f"{what}: the answer could not be read ({type(error).__name__}: {plain(error, 200)})",
            "check AWS_ENDPOINT_URL, proxies and the region",
        ) from None


def _stack_output(settings: Settings, key: str) -> str:
    import boto3

    stack = settings.stack_name("serving")
    cloudformation = boto3.client(
        "cloudformation", region_name=settings.region, config=_aws_config()
    )
    from botocore.exceptions import ClientError

    try:
        answer = _aws_answer(
            "CloudFormation DescribeStacks",
            lambda: cloudformation.describe_stacks(StackName=stack),
        )
    except ClientError as error:
        if aws_errors.kind(error) != "missing-stack":
            raise
        raise CannotRunError(
            f"stack {stack} does not exist in {settings.region} (for these credentials' account), "
            f"so it has no {key} output",
            f"pass --url, or {aws_errors.hint(error)}",
        ) from None
    stacks = answer.get("Stacks") if isinstance(answer, dict) else None
    outputs = stacks[0].get("Outputs", []) if stacks and isinstance(stacks[0], dict) else []
    for item in outputs if isinstance(outputs, list) else []:
        if isinstance(item, dict) and item.get("OutputKey") == key:
            value = item.get("OutputValue")
            if isinstance(value, str) and value:
                return value
    raise CannotRunError(f"{stack} has no output {key}", "pass --url")


def main() -> Any:
    """The installed `pdctl`: usage errors (typer's own) follow --json too."""
    import sys

    try:
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        output.stderr.print("aborted")
        sys.exit(130)
    except typer.TyperException as error:  # typer's click: a usage error, a bad parameter
        code = getattr(error, "exit_code", output.EXIT_CANNOT_RUN)
        if "--json" in sys.argv[1:]:
            message = error.format_message() if hasattr(error, "format_message") else str(error)
            output.json_mode(True)
            try:
                fail(message, "pdctl COMMAND --help", code=code)
            except typer.Exit as done:
                sys.exit(done.exit_code)
        error.show() if hasattr(error, "show") else output.stderr.print(plain(error))
        sys.exit(code)


if __name__ == "__main__":
    main()
