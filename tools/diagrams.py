"""The docs' pictures, drawn as Mermaid from the code's own facts (the default configuration, the
rendered manifests, the endpoint's health-check constants), so a picture cannot drift from what
is built: tests/config/test_docs.py regenerates each block and compares.

`python -m tools.diagrams --write` rewrites every block between its markers (`make config-docs`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app_config import Settings, endpoint_health, load_settings
from app_config.drain import termination_grace_seconds
from serving_manifests import render
from serving_manifests.names import SERVE_PORT, endpoint_service_name

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Block:
    """A generated block: where it lives and what draws it."""

    name: str
    page: str
    draw: Callable[[Settings], str]

    @property
    def start(self) -> str:
        return f"<!-- diagram:{self.name}:start -->"

    @property
    def end(self) -> str:
        return f"<!-- diagram:{self.name}:end -->"

    def render(self, settings: Settings) -> str:
        return f"{self.start}\n```mermaid\n{self.draw(settings)}```\n{self.end}"


def default_settings() -> Settings:
    """What `make synth` builds: cdk.json's settings and nothing else."""
    return load_settings(json.loads((ROOT / "cdk.json").read_text())["context"])


def _worker_groups(settings: Settings) -> dict[str, dict[str, Any]]:
    rayservice = render(settings, None).rayservice
    groups = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return {group["groupName"]: group["template"]["spec"] for group in groups}


def _engine_label(role: str, pod: dict[str, Any]) -> str:
    limits = pod["containers"][0]["resources"]["limits"]
    instance = pod["nodeSelector"]["llm-serving/instance-type"]
    return (
        f"{role} engine (vLLM)<br/>worker group {role}: one pod per {instance},<br/>"
        f"{limits['nvidia.com/gpu']} GPUs, {limits['vpc.amazonaws.com/efa']} EFA devices"
    )


def _front_door(settings: Settings, listener: str) -> str:
    """What the client talks to: with serving.endpoint.authentication iam (the default), API
    Gateway checks the SigV4 signature and reaches the internal load balancer over a VPC link
    (constructs/serving/signed_model_api.py); with none, the client talks to the load balancer."""
    endpoint = settings.serving.endpoint
    if endpoint.authentication != "iam":
        return f'  client -->|"{listener} {endpoint.port}"| nlb\n'
    kind = (
        "private, through the execute-api VPC endpoint"
        if endpoint.scheme == "internal"
        else ("regional")
    )
    return (
        f'  api["API Gateway REST API ({kind})<br/>AWS_IAM: SigV4-signed requests only"]\n'
        '  client -->|"HTTPS, signed"| api\n'
        f'  api -->|"VPC link, TCP {endpoint.port}<br/>streamed responses"| nlb\n'
    )


def request_path(settings: Settings) -> str:
    """Client to decode and prefill, with the ports, names and counts the stacks render."""
    endpoint = settings.serving.endpoint
    listener = "TLS" if endpoint.certificate_arn else "TCP"
    serve_config = render(settings, None).serve_config
    application = serve_config["applications"][0]
    decode = application["args"]["decode_config"]["engine_kwargs"]["kv_transfer_config"]
    backends = ", ".join(decode["kv_connector_extra_config"]["backends"])
    groups = _worker_groups(settings)
    rails = groups["decode"]["containers"][0]["resources"]["limits"]["vpc.amazonaws.com/efa"]
    return (
        "flowchart LR\n"
        '  client(["client"])\n'
        f'  nlb["Network Load Balancer ({endpoint.scheme})<br/>'
        f'health check HTTP {endpoint_health.PROXY_HEALTH_PATH}"]\n'
        f'  proxy["Ray Serve proxy<br/>on every worker pod (proxy_location: '
        f'{serve_config["proxy_location"]})"]\n'
        f'  ingress["OpenAI ingress<br/>{application["import_path"]}"]\n'
        f'  decode["{_engine_label("decode", groups["decode"])}"]\n'
        f'  prefill["{_engine_label("prefill", groups["prefill"])}"]\n'
        + _front_door(settings, listener)
        + f'  nlb -->|"TCP {SERVE_PORT}, IP targets of<br/>'
        f'{endpoint_service_name(settings)}"| proxy\n' + "  proxy --> ingress\n"
        "  ingress -->|request| decode\n"
        '  decode -->|"remote call: the prompt,<br/>one token, keep the KV"| prefill\n'
        '  prefill -.->|"kv_transfer_params"| decode\n'
        f'  prefill ==>|"the KV cache, which decode READs:<br/>'
        f'{decode["kv_connector"]}, {backends} over {rails} EFA rails"| decode\n'
    )


# The new cluster's start (node join, image pull, model load) takes 2 to 20 minutes; the picture
# draws it at this length and says so.
NEW_CLUSTER_START_DRAWN_S = 600


def upgrade_timeline(settings: Settings) -> str:
    """A NewCluster upgrade with the configuration's delays: who serves when."""
    ready = NEW_CLUSTER_START_DRAWN_S
    healthy = ready + endpoint_health.seconds_until_new_targets_healthy()
    deleted = ready + settings.serving.old_cluster_deletion_delay_seconds
    drained = deleted + termination_grace_seconds(settings.serving.drain_timeout_seconds)
    nodes_back = drained + settings.cluster.node_autoscaler.scale_down_unneeded_minutes * 60
    return (
        "gantt\n"
        "  title NewCluster upgrade with the default settings (seconds from cdk deploy)\n"
        "  dateFormat X\n"
        "  axisFormat %s\n"
        "  section old Ray cluster\n"
        f"  serves :0, {deleted}\n"
        f"  deleted and streams in flight finish (grace period) :{deleted}, {drained}\n"
        f"  its empty GPU nodes go back (scale_down_unneeded_minutes) :{drained}, {nodes_back}\n"
        "  section new Ray cluster\n"
        f"  nodes join and pull the image and load the model (2 to 20 min drawn as {ready // 60}) "
        f":0, {ready}\n"
        f"  ready then its targets register and pass health checks :{ready}, {healthy}\n"
        f"  serves beside the old cluster :crit, {healthy}, {deleted}\n"
        f"  serves alone :{deleted}, {nodes_back}\n"
    )


BLOCKS = (
    Block("request-path", "README.md", request_path),
    Block("upgrade-timeline", "docs/operating.md", upgrade_timeline),
)


def current(block: Block, text: str) -> str:
    """The block as it stands in ``text``, markers included."""
    return block.start + text.split(block.start, 1)[1].split(block.end, 1)[0] + block.end


def write_all(settings: Settings) -> None:
    for block in BLOCKS:
        page = ROOT / block.page
        text = page.read_text()
        page.write_text(text.replace(current(block, text), block.render(settings)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update the pages in place")
    args = parser.parse_args()
    settings = default_settings()
    if args.write:
        write_all(settings)
    else:
        for block in BLOCKS:
            print(block.render(settings))


if __name__ == "__main__":
    main()
