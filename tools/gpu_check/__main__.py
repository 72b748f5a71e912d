"""`make gpu-check`: the synthesized engine configuration on real vLLM and Ray Serve, on one GPU.

    python -m tools.gpu_check run [--model-config config.json] [--deployment config.yaml]
                                  [--stage engines|all]
    python -m tools.gpu_check report docs/gpu-check/*.json   # the docs' record of runs

Stage 1 starts prefill and decode vLLM engines with the deployed engine arguments and checks the
NIXL hand-off between them; stage 2 deploys the whole Serve application on a local Ray shaped
like KubeRay's. The model is the configured one's architecture, scaled down, random weights.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app_config.node_labels import GPU_ROLES
from pdctl.checks import Check
from tools.gpu_check import engines, serve_app
from tools.gpu_check.deployed import DeployedRayService
from tools.gpu_check.machine import gpu_name, versions
from tools.gpu_check.one_gpu import engine_kwargs, one_gpu_serve_config, served_model
from tools.gpu_check.results import Run, line, markdown_report
from tools.gpu_check.scale_down import is_moe

ROOT = Path(__file__).resolve().parents[2]
# The process environment of both engines and every Ray node, each with its reason.
ENVIRONMENT = {
    # Default kernels change greedy results with batch size; these make P/D and local equal.
    "VLLM_BATCH_INVARIANT": "1",
    # Nothing comes from the Hub: the model and tokenizer are local files.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}
# MoE answers differ between runs even with batch-invariant kernels (seen on an H200, 2026-12-01:
# the expert kernels and a random router's near-equal scores flip a token now and then). Up to
# half the prompts may differ; the permuted-block control, which must change every answer,
# carries the proof.
MOE_TOLERANCE = 0.5
PARSER_OPTIONS = ("tool_call_parser", "reasoning_parser")


def model_config(source: str | None, model_id: str) -> dict[str, Any]:
    """config.json from a file or a model folder the user gave, else from the Hugging Face Hub."""
    if source:
        path = Path(source)
        return json.loads((path / "config.json" if path.is_dir() else path).read_text())
    url = f"https://huggingface.co/{model_id}/resolve/main/config.json"
    try:
        with urllib.request.urlopen(url, timeout=15) as answer:
            return json.loads(answer.read())
    except OSError as error:
        sys.exit(f"gpu-check: cannot read {url} ({error}); pass --model-config <config.json>")


def chat_parsers(serve_config: Mapping[str, Any]) -> dict[str, str]:
    """The tool-call and reasoning parsers the deployed engines name (either side)."""
    found: dict[str, str] = {}
    for role in GPU_ROLES:
        kwargs = engine_kwargs(serve_config, role)
        found.update({key: kwargs[key] for key in PARSER_OPTIONS if kwargs.get(key)})
    return found


def efa_present() -> bool:
    """An EFA device (the efa driver's RDMA devices in sysfs), which NIXL LIBFABRIC needs."""
    devices = Path("/sys/class/infiniband")
    return devices.is_dir() and any(
        (device / "device" / "driver").resolve().name == "efa" for device in devices.iterdir()
    )


def run(args: argparse.Namespace) -> int:
    from tools.gpu_check import tiny_model

    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    deployed = DeployedRayService.read(Path(args.cdk_out))
    model_id, _ = served_model(deployed.serve_config)
    config = model_config(args.model_config, model_id)
    model_path = out / "model"
    scaled = tiny_model.build(config, model_path, chat_parsers(deployed.serve_config))
    serve_config, changes = one_gpu_serve_config(
        deployed.serve_config,
        str(model_path.resolve()),
        efa=efa_present(),
        http_port=serve_app.free_port(),
    )
    resources, resource_changes = serve_app.one_gpu_worker_resources(
        {role: deployed.worker_resources(role) for role in GPU_ROLES}
    )
    record = Run(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        gpu=gpu_name(),
        model=model_id,
        architecture=f"{config['architectures'][0]} ({args.model_config or 'the Hub'})",
        versions=versions(),
        changes=[str(change) for change in changes] + resource_changes,
        scale_down=scaled,
        deployment=args.deployment or "",
    )
    print(f"gpu-check: {model_id} scaled down on {record.gpu}; {record.versions}")
    for change in record.changes:
        print(f"  change: {change}")
    print(f"  environment: {ENVIRONMENT}")
    tolerance = MOE_TOLERANCE if is_moe(config) else 0.0
    texts = engines.prompts(6)
    chat_texts = [f"chat {index}: " + text for index, text in enumerate(texts[:2])]
    try:
        checks, local, chat = engines.run(
            str(model_path.resolve()),
            model_id,
            {role: engine_kwargs(serve_config, role) for role in GPU_ROLES},
            ENVIRONMENT,
            logs,
            tolerance=tolerance,
            texts=texts,
            chat_texts=chat_texts,
        )
        record.checks += checks
        if args.stage == "all":
            (application,) = serve_config["applications"]
            backend = application["args"]["decode_config"]["engine_kwargs"]["kv_transfer_config"]
            checks, record.metrics = serve_app.run(
                serve_config,
                deployed.head_start_params,
                resources,
                ENVIRONMENT,
                local,
                chat,
                logs,
                tolerance=tolerance,
                backend=backend["kv_connector_extra_config"]["backends"][0],
            )
            record.checks += checks
    except Exception as error:  # an engine that does not start is the check's finding
        record.checks.append(Check("the checks ran to the end", False, f"{error}"[-1500:]))
    finally:
        record.write(out / "result.json")
        for check in record.checks:
            print(line(check))
    print(f"gpu-check: {'PASS' if record.passed else 'FAIL'} ({out / 'result.json'})")
    return 0 if record.passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="build the small model and run the checks")
    run_parser.add_argument("--cdk-out", default=str(ROOT / "cdk.out"))
    run_parser.add_argument("--model-config", help="config.json (file or model folder)")
    run_parser.add_argument(
        "--deployment", help="the configuration file cdk.out was synthesized from (recorded)"
    )
    run_parser.add_argument("--out", default=str(ROOT / "build" / "gpu-check"))
    run_parser.add_argument("--stage", choices=("engines", "all"), default="all")
    report = commands.add_parser("report", help="the docs' tables from result files")
    report.add_argument("results", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "report":
        print(markdown_report(Run.read(Path(path)) for path in args.results))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
