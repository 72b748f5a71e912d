"""The managed scraper's view of the local cluster: the synthesized scrape configuration's rules,
run the way Prometheus runs them on what its Kubernetes pod discovery would report for the
RayService's pods, against the local Ray nodes' metrics ports.

Implemented here (Prometheus documentation, "Configuration": ``relabel_config``,
``kubernetes_sd_config`` role ``pod``; "Jobs and instances"):
  * discovery: one target per container port of each pod, with ``__meta_kubernetes_*`` labels
    (pod labels sanitized to ``[a-zA-Z0-9_]``), ``job`` set before relabeling;
  * relabeling: ``replace`` (the default), ``keep``, ``drop``; the regex is anchored at both ends,
    ``source_labels`` joined by ``separator`` (default ``;``), ``replacement`` defaults to
    ``$1``; an empty result removes the target label; ``instance`` defaults to ``__address__``;
    labels starting with ``__`` are dropped from the target afterwards;
  * a scrape: the target's labels on every sample (a clash renames the sample's label to
    ``exported_<name>``, ``honor_labels: false``), then ``metric_relabel_configs``; and ``up``.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# What KubeRay puts on every Ray pod besides the template's labels
# (ray-operator/controllers/ray/common/pod.go, labelPod; ray-operator/controllers/ray/utils).
KUBERAY_HEAD_GROUP = "headgroup"


def kuberay_pod_labels(cluster: str, group: str) -> dict[str, str]:
    head = group == KUBERAY_HEAD_GROUP
    node_type = "head" if head else "worker"
    return {
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": group,
        "ray.io/identifier": f"{cluster}-{node_type}",
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }


def sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


@dataclass(frozen=True)
class Pod:
    """A Ray pod as the API server would list it."""

    name: str
    namespace: str
    node_name: str
    ip: str
    labels: Mapping[str, str]
    container: Mapping[str, Any]  # the Ray container of the pod template


def discover(pod: Pod, job_name: str) -> list[dict[str, str]]:
    """kubernetes_sd_configs role pod: one target per declared container port."""
    common = {
        "job": job_name,
        "__scheme__": "http",
        "__metrics_path__": "/metrics",
        "__meta_kubernetes_namespace": pod.namespace,
        "__meta_kubernetes_pod_name": pod.name,
        "__meta_kubernetes_pod_ip": pod.ip,
        "__meta_kubernetes_pod_node_name": pod.node_name,
        "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_name": pod.container["name"],
    }
    for key, value in pod.labels.items():
        common[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
        common[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
    return [
        {
            **common,
            "__address__": f"{pod.ip}:{port['containerPort']}",
            "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
            "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
            "__meta_kubernetes_pod_container_port_protocol": port.get("protocol", "TCP"),
        }
        for port in pod.container.get("ports", [])
    ]


def _expand(replacement: str, match: re.Match[str]) -> str:
    """Go's regexp Expand as Prometheus uses it: $1, ${1}, $name, ${name}; unknown -> ''."""

    def group(found: re.Match[str]) -> str:
        key = found.group(1) or found.group(2)
        try:
            value = match.group(int(key) if key.isdigit() else key)
        except IndexError:  # no such group
            return ""
        return value or ""

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", group, replacement)


def relabel(labels: Mapping[str, str], configs: Iterable[Mapping[str, Any]]) -> dict | None:
    """The label set after the rules, or None when a rule drops it."""
    result = dict(labels)
    for config in configs:
        action = config.get("action", "replace")
        regex = re.compile(f"^(?:{config.get('regex', '(.*)')})$")
        value = config.get("separator", ";").join(
            result.get(name, "") for name in config.get("source_labels", [])
        )
        match = regex.match(value)
        if action == "keep":
            if not match:
                return None
        elif action == "drop":
            if match:
                return None
        elif action == "replace":
            if not match:
                continue
            target = _expand(config["target_label"], match)
            replaced = _expand(str(config.get("replacement", "$1")), match)
            if replaced:
                result[target] = replaced
            else:
                result.pop(target, None)
        else:
            raise NotImplementedError(f"relabel action {action!r} is not emulated")
    return result


def target_labels(discovered: Mapping[str, str], job: Mapping[str, Any]) -> dict | None:
    relabeled = relabel(discovered, job.get("relabel_configs", []))
    if relabeled is None:
        return None
    relabeled.setdefault("instance", relabeled["__address__"])
    return relabeled


@dataclass(frozen=True)
class Series:
    name: str
    labels: Mapping[str, str]
    value: float


def scrape(
    target: Mapping[str, str], job: Mapping[str, Any], fetch: Callable[[str], str]
) -> list[Series]:
    """One scrape of a relabeled target: its series as they would be stored."""
    visible = {key: value for key, value in target.items() if not key.startswith("__")}
    url = f"{target['__scheme__']}://{target['__address__']}{target['__metrics_path__']}"
    try:
        text = fetch(url)
    except OSError:
        return [Series("up", visible, 0.0)]
    stored = [Series("up", visible, 1.0)]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {
                (f"exported_{key}" if key in visible else key): value
                for key, value in sample.labels.items()
            }
            kept = relabel(
                {**labels, **visible, "__name__": sample.name},
                job.get("metric_relabel_configs", []),
            )
            if kept is not None:
                name = kept.pop("__name__")
                stored.append(Series(name, kept, sample.value))
    return stored


def fetch_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()
