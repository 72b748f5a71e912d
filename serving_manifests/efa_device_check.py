"""The GPU worker pods' EFA device check (the `efa-devices` init container of rayservice.yaml),
filled in for one side: the devices the pod requests, the side's name, the image, and libfabric's
settings as the Ray container has them.

Why before Ray: vLLM 0.26 with NIXL's LIBFABRIC backend and no usable EFA device dies with
`NIXL_ERR_NOT_FOUND` only once its KV cache is set up, after the weight load, compilation and
memory profiling (154 s for a 115M-parameter model on one GPU; many minutes for a full one), and
Serve restarts the replica into the same failure. This check takes a second.

Why the same devices as the engine: the kubelet's device manager allocates an init container's
devices first and hands them on to the pod's app containers (kubernetes pkg/kubelet/cm/
devicemanager/manager.go, `Allocate` and `devicesToReuse`); the pod's effective request is the
larger of the two (the init container's equals the Ray container's), so it asks for nothing
more. What it cannot see: a path between nodes that carries nothing (the EFA security group,
another zone); `pdctl efa-check` measures that.
"""

from __future__ import annotations

from typing import Any

from app_config.node_labels import EFA_RESOURCE

CONTAINER = "efa-devices"
DEVICES_ENV = "LLM_SERVING_EFA_DEVICES"
SIDE_ENV = "LLM_SERVING_SIDE"
NODE_ENV = "LLM_SERVING_NODE"
LINGER_ENV = "LLM_SERVING_EFA_CHECK_LINGER_SECONDS"
DEVICE_DIRECTORY = "/dev/infiniband"  # where the EFA device plugin mounts the uverbs devices
LIBFABRIC_ENV_PREFIX = "FI_"


def fill_efa_device_check(
    spec: dict[str, Any], role: str, devices: int, ray_container: dict[str, Any]
) -> None:
    """``spec`` is a worker pod template's spec; ``devices`` the EFA devices its Ray container
    requests (every network card of the node)."""
    (check,) = [c for c in spec["initContainers"] if c["name"] == CONTAINER]
    check["image"] = ray_container["image"]
    values = {DEVICES_ENV: str(devices), SIDE_ENV: role}
    for variable in check["env"]:
        if variable["name"] in values:
            variable["value"] = values[variable["name"]]
    # libfabric initialised as the engine initialises it (FI_PROVIDER and the EFA options).
    libfabric = [v for v in ray_container["env"] if v["name"].startswith(LIBFABRIC_ENV_PREFIX)]
    check["env"] = [*libfabric, *check["env"]]
    for limits in check["resources"].values():
        limits[EFA_RESOURCE] = str(devices)
