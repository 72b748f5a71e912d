"""Which Auto Scaling groups the app's Cluster Autoscaler may resize: this deployment's node
groups, and no other node group of the cluster.

EKS tags the Auto Scaling group of every managed node group with
``k8s.io/cluster-autoscaler/enabled`` and ``k8s.io/cluster-autoscaler/<cluster>`` (EKS user
guide, "Managed node groups"), so an autoscaler that discovers by those two alone (the chart's
default ``autoDiscovery.tags``) resizes every managed node group of the cluster, an existing
cluster's owner's too. So the app puts one more tag, ``DEPLOYMENT_TAG`` = the deployment's
prefix, on the Auto Scaling group of each node group it creates, and both the discovery filter
and the autoscaler's IAM writes require it:

- Discovery: the chart joins ``autoDiscovery.tags`` into one
  ``--node-group-auto-discovery=asg:tag=<t1>,<t2>,...`` (charts/cluster-autoscaler/templates/
  deployment.yaml, chart 9.59.0); the AWS provider reads each ``key=value`` as a tag that must
  have that value and a bare ``key`` as a tag that must exist (aws_manager.go
  parseASGAutoDiscoverySpec), and asks DescribeAutoScalingGroups with one filter per tag, which
  AWS ANDs (aws_wrapper.go getAutoscalingGroupsByTags; cluster-autoscaler 1.35.2).
- IAM: SetDesiredCapacity and TerminateInstanceInAutoScalingGroup only on groups that carry
  both the cluster's ``eks:cluster-name`` and this tag (constructs/cluster/cluster_autoscaler.py).

The tag goes on the Auto Scaling group itself because a managed node group's own tags never
reach it (EKS user guide, "Managed node groups": they "do not propagate to other resources in
the node group, such as Auto Scaling groups"; aws/containers-roadmap#608).
"""

from __future__ import annotations

# The cluster tags EKS puts on every managed node group's Auto Scaling group.
ENABLED_TAG = "k8s.io/cluster-autoscaler/enabled"
CLUSTER_NAME_TAG = "eks:cluster-name"
# The app's own: its value is the deployment's prefix (two deployments on one cluster stay apart).
DEPLOYMENT_TAG = "pd-llm-serving/deployment"


def cluster_tag(cluster_name: str) -> str:
    return f"k8s.io/cluster-autoscaler/{cluster_name}"


def discovery_tags(cluster_name: str, prefix: str) -> list[str]:
    """The chart's ``autoDiscovery.tags``: EKS's two tags and the deployment's, all required."""
    return [ENABLED_TAG, cluster_tag(cluster_name), f"{DEPLOYMENT_TAG}={prefix}"]
