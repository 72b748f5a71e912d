"""What the Cluster Autoscaler must know about a GPU node group that has no node yet.

Cluster Autoscaler 1.35 builds the template node of an empty EKS managed node group from the
instance type (vCPUs, memory, GPUs: ec2:DescribeInstanceTypes), the node group's labels and
taints (eks:DescribeNodegroup; taints only with a value), and resources named in the node group's
own tags, `k8s.io/cluster-autoscaler/node-template/resources/<resource>` (read from
DescribeNodegroup since CA 1.28; they override tags on the Auto Scaling group, which managed node
group tags do not reach). Extended resources come from those tags only: without them no EFA
device and no huge page exists on the template, and a Ray worker pod never fits an empty group
(cluster-autoscaler cloudprovider/aws/aws_manager.go buildNodeFromTemplate, aws_wrapper.go).
"""

from __future__ import annotations

from app_config.node_labels import EFA_HUGEPAGES, EFA_RESOURCE, GPU_RESOURCE

RESOURCE_TAG_PREFIX = "k8s.io/cluster-autoscaler/node-template/resources/"


def node_template_tags(gpus: int, efa_devices: int) -> dict[str, str]:
    """The extended resources one node of the group offers: every EFA device (one per network
    card), the huge pages the EFA driver's buffers use, and the GPUs (also known from the
    instance type; stated so that a type missing from CA's lists still fits)."""
    resources = {GPU_RESOURCE: str(gpus), EFA_RESOURCE: str(efa_devices), **EFA_HUGEPAGES}
    return {f"{RESOURCE_TAG_PREFIX}{name}": quantity for name, quantity in resources.items()}
