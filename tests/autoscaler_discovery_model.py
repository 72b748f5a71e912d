"""Which Auto Scaling groups the Cluster Autoscaler's AWS provider discovers, and which it may
resize, from the chart's values and its IAM policy: the rules of the versions the app pins.

- The chart (cluster-autoscaler 9.59.0, templates/deployment.yaml) renders, for cloudProvider aws
  and a non-empty ``autoDiscovery.clusterName``, one flag
  ``--node-group-auto-discovery=asg:tag=<autoDiscovery.tags joined by ','>``, each tag through
  ``tpl`` (values.yaml's default tags: ``k8s.io/cluster-autoscaler/enabled`` and
  ``k8s.io/cluster-autoscaler/{{ .Values.autoDiscovery.clusterName }}``).
- cluster-autoscaler 1.35.2, cloudprovider/aws/aws_manager.go parseASGAutoDiscoverySpec: the
  part after ``asg:tag=`` splits on ',', each item on the first '=' into key and value (no '=':
  the value is empty).
- aws_wrapper.go getAutoscalingGroupsByTags: one DescribeAutoScalingGroups filter per tag,
  ``tag:<key>`` = value where a value is given, else ``tag-key`` = key; the Auto Scaling API
  returns the groups that match every filter (API reference, DescribeAutoScalingGroups,
  Filters: "the results include only the groups that match all of the filters").
- IAM: the writes' conditions on ``aws:ResourceTag/<key>`` see the group's tags (Auto Scaling
  user guide, "Control access using tags"); evaluated by tests/iam_model.py.
"""

from __future__ import annotations

from typing import Any

from tests.iam_model import Request, is_allowed

CHART_DEFAULT_TAGS = (
    "k8s.io/cluster-autoscaler/enabled",
    "k8s.io/cluster-autoscaler/{{ .Values.autoDiscovery.clusterName }}",
)
ACCOUNT = "111122223333"


def discovery_spec(values: dict[str, Any]) -> str | None:
    """The flag's value the chart renders from these values (None: no auto-discovery)."""
    discovery = values.get("autoDiscovery", {})
    cluster = discovery.get("clusterName")
    if not cluster:
        return None
    tags = discovery.get("tags", CHART_DEFAULT_TAGS)
    rendered = [tag.replace("{{ .Values.autoDiscovery.clusterName }}", cluster) for tag in tags]
    return "asg:tag=" + ",".join(rendered)


def _filters(spec: str) -> dict[str, str]:
    kind, _, param = spec.partition(":")
    key, _, value = param.partition("=")
    assert (kind, key) == ("asg", "tag"), spec
    assert value, spec
    return {item.partition("=")[0]: item.partition("=")[2] for item in value.split(",")}


def discovered_groups(spec: str | None, groups: dict[str, dict[str, str]]) -> set[str]:
    """The names of the groups (name -> tags) DescribeAutoScalingGroups returns for the spec."""
    if spec is None:
        return set()
    filters = _filters(spec)
    return {
        name
        for name, tags in groups.items()
        if all(key in tags and (not value or tags[key] == value) for key, value in filters.items())
    }


def write_allowed(statement: dict[str, Any], tags: dict[str, str]) -> bool:
    """Whether the statement lets the autoscaler call each of its writes on a group with these
    tags (the group's ARN holds a UUID; the statements name it by tag)."""
    context = {f"aws:ResourceTag/{key}": value for key, value in tags.items()}
    arn = f"arn:aws:autoscaling:us-west-2:{ACCOUNT}:autoScalingGroup:uuid:autoScalingGroupName/g"
    actions = (
        statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    )
    return all(
        is_allowed(
            Request(f"arn:aws:iam::{ACCOUNT}:role/autoscaler", ACCOUNT, action, arn, context),
            identity=[{"Statement": [statement]}],
        )
        for action in actions
    )
