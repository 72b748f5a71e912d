"""The two Jobs of `pdctl efa-check`: a fi_pingpong server on a decode node and a client on a
prefill node, from the Ray LLM image, holding every EFA device of their nodes; and the two
headless Services through which each side learns that the other runs.

Why fi_pingpong: it is what the image has. The EFA installer puts libfabric's utilities
(`fi_info`, `fi_pingpong`, `fi_strerror`) in /opt/amazon/efa/bin, on the image's PATH
(aws/deep-learning-containers docker/ray_llm/Dockerfile.cuda runs the installer); the fabtests
suite (fi_rma_bw and friends) is a separate build the image does not carry, and NIXL's nixlbench
is not in the nixl wheels and needs etcd.

The fabric, named with `-f efa` on every call (libfabric 2.4.0, EFA installer 1.49's base,
prov/efa/src/efa_prov.c efa_util_prov_initialize): the EFA provider lists every device under
`efa-direct` first, then under `efa`, both with the same domain name (`<device>-rdm`). Without
`-f`, fi_pingpong takes the first match, efa-direct, whose largest message is the device's
max_msg_sz (about 8 KiB; efa_user_info.c efa_user_info_alter_direct), so its `-S all` sizes stop
there and its bandwidth says nothing about the line rate. The `efa` fabric (the RDM protocols on
top of the device) carries fi_pingpong's largest size (6 MiB, util/pingpong.c PP_MAX_DATA_MSG).
efa-direct rides the same device and the same security group, so what fails on it fails here too.

Timing: both Jobs start together, so the two nodes join in parallel. Each pod waits until the
other's headless Service resolves (the other pod runs), then they run pair after pair, each
bounded by `pair_seconds` (fi_pingpong itself waits for completions forever: util/pingpong.c
pp_get_cq_comp with timeout_sec -1). If the first pairs all fail, the path is down rather than
a device (a wrong EFA security group hangs every pair): both sides stop there.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from app_config import Settings
from app_config.efa_check import device_pairs
from app_config.node_labels import EFA_HUGEPAGES, EFA_RESOURCE
from serving_manifests.image import pod_image
from serving_manifests.names import EFA_CHECK_FIRST_PORT, EFA_CHECK_LABELS

MARK = "### pdctl-efa-check"
SERVER_ROLE, CLIENT_ROLE = "decode", "prefill"
FABRIC = "efa"  # see the module docstring
# Stop after this many pairs in a row without a result, before any pair had one: the path
# between the nodes, not a device, is down, and the rest would only wait out their bounds.
STOP_AFTER_FAILED_PAIRS = 2
# `timeout` sends TERM at the bound, then KILL this much later (exit 124, or 137 after KILL).
KILL_AFTER_SECONDS = 5
# libfabric over EFA as the Ray workers use it (manifests/rayservice.yaml).
FABRIC_ENV = {"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"}
DEVICE_DIRECTORY = "/dev/infiniband"  # the uverbs devices the EFA device plugin mounts
PARTNER_POLL_SECONDS = 2
# The two pods see each other's name at different times: CoreDNS caches an answer that the name
# does not exist yet for up to 30 s (EKS's Corefile: `cache 30`). The first pair's window is
# longer by that much on both sides, so neither starts it after the other's window has closed.
FIRST_PAIR_EXTRA_SECONDS = 30
JOB_GRACE_SECONDS = 120


@dataclass(frozen=True)
class EfaCheckPlan:
    """What both Jobs share: the settings' bounds and where each side runs."""

    name: str
    namespace: str
    image: str
    iterations: int
    deadline_seconds: int
    pair_seconds: int
    efa_devices: dict[str, int]  # per role: the instance's network cards
    node_selectors: dict[str, dict[str, str]]
    tolerations: dict[str, list[dict[str, str]]]
    first_pair_extra_seconds: int = FIRST_PAIR_EXTRA_SECONDS

    @property
    def pairs(self) -> int:
        return device_pairs(self.efa_devices[CLIENT_ROLE], self.efa_devices[SERVER_ROLE])


# A node named on the command line may be cordoned (docs/observability.md, "EFA runbook": cordon
# it so that no Ray worker takes it, then check it). The scheduler's NodeUnschedulable filter
# admits a pod onto a node with spec.unschedulable only if it tolerates this taint (kubernetes
# pkg/scheduler/framework/plugins/nodeunschedulable).
CORDONED = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


def plan_for(
    settings: Settings,
    name: str,
    nodes: dict[str, str | None] | None = None,
    account: str | None = None,
) -> EfaCheckPlan:
    """``nodes`` pins a side to one node by name, cordoned or not; else any schedulable node of
    the group.
    ``account`` locates an image cache (serving.image_cache)."""
    groups = settings.gpu_nodes.groups()
    selectors, tolerations = {}, {}
    for role, group in groups.items():
        placement = group.placement(role)
        selectors[role] = dict(placement.labels)
        tolerations[role] = placement.tolerations()
        if nodes and nodes.get(role):
            selectors[role]["kubernetes.io/hostname"] = nodes[role]
            tolerations[role] = [*tolerations[role], CORDONED]
    check = settings.gpu_nodes.efa_check
    cards = {role: group.instance.network_cards for role, group in groups.items()}
    pairs = device_pairs(cards[CLIENT_ROLE], cards[SERVER_ROLE])
    join_minutes = settings.cluster.node_autoscaler.max_node_provision_minutes
    return EfaCheckPlan(
        name=name,
        namespace=settings.serving.namespace,
        image=pod_image(settings, account),
        iterations=check.iterations,
        deadline_seconds=check.deadline_seconds(pairs, join_minutes),
        pair_seconds=check.pair_seconds,
        efa_devices=cards,
        node_selectors=selectors,
        tolerations=tolerations,
    )


def fi_info_command() -> str:
    """The listing both this check and the Ray workers' efa-devices init container read."""
    return shlex.join(["fi_info", "-p", "efa", "-f", FABRIC, "-t", "FI_EP_RDM"])


def _pingpong(iterations: int) -> str:
    options = ["-p", "efa", "-f", FABRIC, "-e", "rdm", "-I", str(iterations), "-S", "all"]
    return shlex.join(["fi_pingpong", *options])


def partner_address(plan: EfaCheckPlan, role: str) -> str:
    """The other side's headless Service: it resolves once that side's pod runs."""
    other = CLIENT_ROLE if role == SERVER_ROLE else SERVER_ROLE
    return f"{service_name(plan, other)}.{plan.namespace}.svc"


def _prelude(plan: EfaCheckPlan, role: str) -> str:
    """Devices, then the wait for the partner. Domains in sorted order on both sides."""
    partner = shlex.quote(partner_address(plan, role))
    first = plan.pair_seconds + plan.first_pair_extra_seconds
    return f"""
echo "{MARK} uverbs $(ls {DEVICE_DIRECTORY} 2>/dev/null | grep -c '^uverbs')"
echo "{MARK} fi_info"
{fi_info_command()} || echo "{MARK} fi_info-failed $?"
domains=($({fi_info_command()} 2>/dev/null | awk '$1 == "domain:" {{print $2}}' | sort -u))
echo "{MARK} partner {partner}"
until partner_ip=$(getent hosts {partner} | awk '{{print $1; exit}}') && [ -n "$partner_ip" ]; do
  sleep {PARTNER_POLL_SECONDS}
done
echo "{MARK} partner-ready $partner_ip"
failed=0
measured=0
window() {{ echo $(( $1 == 0 ? {first} : {plan.pair_seconds} )); }}
"""


def _after_pair() -> str:
    """Counts the pair's outcome; stops when the first pairs all failed (path down)."""
    return f"""  if [ "$rc" -eq 0 ]; then
    measured=$((measured + 1))
  else
    failed=$((failed + 1))
  fi
  if [ "$measured" -eq 0 ] && [ "$failed" -ge {STOP_AFTER_FAILED_PAIRS} ]; then
    echo "{MARK} stopped $failed"
    break
  fi
"""


def _bounded(plan: EfaCheckPlan, seconds: str) -> str:
    return f"timeout -k {KILL_AFTER_SECONDS} {seconds} {_pingpong(plan.iterations)}"


def server_script(plan: EfaCheckPlan) -> str:
    """Pair k listens on port FIRST + k with device k mod n, for at most its window (the client
    connects within seconds: both sides start pair k when pair k-1 ends)."""
    return (
        _prelude(plan, SERVER_ROLE)
        + f"""for ((k = 0; k < {plan.pairs} && ${{#domains[@]}} > 0; k++)); do
  domain=${{domains[k % ${{#domains[@]}}]}}
  echo "{MARK} attempt $k $domain 1"
  {_bounded(plan, '$(window "$k")')} -d "$domain" -B $(({EFA_CHECK_FIRST_PORT} + k))
  rc=$?
  echo "{MARK} end $k $domain $rc"
{_after_pair()}done
echo "{MARK} done"
"""
    )


def client_script(plan: EfaCheckPlan) -> str:
    """Pair k connects device k mod n to the server's port FIRST + k, retrying while the server
    finishes the previous pair, every attempt inside the pair's pair_seconds. Only the last
    attempt's rows count (efa_results)."""
    return (
        _prelude(plan, CLIENT_ROLE)
        + f"""for ((k = 0; k < {plan.pairs} && ${{#domains[@]}} > 0; k++)); do
  domain=${{domains[k % ${{#domains[@]}}]}}
  pair_end=$((SECONDS + $(window "$k")))
  attempt=0
  rc=124
  while left=$((pair_end - SECONDS)) && [ "$left" -gt 0 ]; do  # `timeout 0` never times out
    attempt=$((attempt + 1))
    echo "{MARK} attempt $k $domain $attempt"
    {_bounded(plan, '"$left"')} -d "$domain" \\
        -P $(({EFA_CHECK_FIRST_PORT} + k)) "$partner_ip"
    rc=$?
    echo "{MARK} end $k $domain $rc"
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then break; fi
    sleep 1
  done
{_after_pair()}done
echo "{MARK} done"
"""
    )


def job_name(plan: EfaCheckPlan, role: str) -> str:
    return f"{plan.name}-{role}"


def service_name(plan: EfaCheckPlan, role: str) -> str:
    return f"{plan.name}-{role}"


def _pod_labels(plan: EfaCheckPlan, role: str) -> dict[str, str]:
    return {**EFA_CHECK_LABELS, "llm-serving/efa-check": plan.name, "llm-serving/role": role}


def service_manifest(plan: EfaCheckPlan, role: str) -> dict[str, Any]:
    """Headless, no ports: only a name that resolves to the side's pod while it is ready (a pod
    without a readiness probe is ready once its container runs)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(plan, role),
            "namespace": plan.namespace,
            "labels": {**EFA_CHECK_LABELS, "llm-serving/efa-check": plan.name},
        },
        "spec": {"clusterIP": "None", "selector": _pod_labels(plan, role)},
    }


def script(plan: EfaCheckPlan, role: str) -> str:
    return server_script(plan) if role == SERVER_ROLE else client_script(plan)


def job_manifest(plan: EfaCheckPlan, role: str) -> dict[str, Any]:
    """Bounded by activeDeadlineSeconds even if pdctl dies; deleted by pdctl, else by the TTL."""
    efa = {EFA_RESOURCE: str(plan.efa_devices[role]), **EFA_HUGEPAGES}
    resources = {"cpu": "2", "memory": "8Gi", **efa}
    labels = _pod_labels(plan, role)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(plan, role), "namespace": plan.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            # pdctl reads the logs at its deadline: the pods outlive it by a little.
            "activeDeadlineSeconds": plan.deadline_seconds + JOB_GRACE_SECONDS,
            "ttlSecondsAfterFinished": 600,
            "template": {
                "metadata": {"labels": labels},  # network policy allow-pdctl-efa-check
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "nodeSelector": plan.node_selectors[role],
                    "tolerations": plan.tolerations[role],
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": "efa-check",
                            "image": plan.image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["bash", "-c", script(plan, role)],
                            "env": [{"name": k, "value": v} for k, v in FABRIC_ENV.items()],
                            "resources": {"requests": resources, "limits": resources},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["NET_RAW"]},
                            },
                        }
                    ],
                },
            },
        },
    }
