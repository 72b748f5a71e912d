"""Node labels and taints this project owns. Node groups set them; Ray worker groups and the
device plugins select and tolerate them; users' own labels and taints may not collide with them."""

from __future__ import annotations

ROLE_LABEL = "llm-serving/role"
INSTANCE_TYPE_LABEL = "llm-serving/instance-type"
EFA_LABEL = "llm-serving/efa"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"  # also what NVIDIA's device plugin chart selects
# Cluster Autoscaler's GPU label on AWS (cloudprovider/aws GPULabel, 1.35): a node that carries it
# but has no nvidia.com/gpu allocatable yet counts as not ready (processors/customresources/
# gpu_processor.go), so CA neither buys a second node for a pod that the first will take once
# its device plugin runs, nor keeps such a node as the group's template.
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"

SYSTEM_ROLE = "system"
GPU_ROLES = ("prefill", "decode")
# The node group (and its label, taint and Ray worker group) of gpu_nodes.shared: both sides on
# every node, each on its own GPUs of it.
SHARED_GROUP = "shared"

GPU_TAINT_KEY = "nvidia.com/gpu"  # the taint NVIDIA's device plugin chart tolerates by default
ROLE_TAINT_KEY = ROLE_LABEL

OWNED_LABEL_KEYS = frozenset(
    {ROLE_LABEL, INSTANCE_TYPE_LABEL, EFA_LABEL, GPU_PRESENT_LABEL, ACCELERATOR_LABEL}
)
OWNED_TAINT_KEYS = frozenset({GPU_TAINT_KEY, ROLE_TAINT_KEY})

# Extended resources the device plugins advertise on GPU nodes; the Ray worker pods request them.
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# What AWS's EFA examples request per pod: the EFA driver's buffers live in 2 MiB huge pages.
EFA_HUGEPAGES = {"hugepages-2Mi": "5120Mi"}
