"""Interface VPC endpoints the network stack creates, with why: what nodes and pods call on
every start or every request, kept off NAT."""

from __future__ import annotations

# Service names as in com.amazonaws.<region>.<name>.
INTERFACE_ENDPOINT_SERVICES: dict[str, str] = {
    "ecr.api": "ECR API: the 20+ GB Ray LLM image (its layers come through the S3 gateway)",
    "ecr.dkr": "ECR registry: image manifests and layer URLs",
    "sts": "STS: IRSA's AssumeRoleWithWebIdentity from every pod with a role",
    "ec2": "EC2: the VPC CNI (ipamd) attaches ENIs and assigns pod IPs",
    "eks-auth": "EKS Auth: the EKS Pod Identity agent's credential calls",
    "logs": "CloudWatch Logs: container and node logs",
    "ssm": "Systems Manager: Session Manager, the only way onto a node (no SSH)",
    "ssmmessages": "Session Manager's data channel",
    "ec2messages": "Systems Manager agent messages",
    "secretsmanager": "Secrets Manager: the Hugging Face token for the Secrets Store CSI driver",
    # The Cluster Autoscaler's calls (EKS user guide, "Deploy private clusters": the autoscaling
    # endpoint; eks for DescribeNodegroup, which builds an empty GPU group's node template).
    "autoscaling": "EC2 Auto Scaling: the Cluster Autoscaler reads and resizes node groups",
    "eks": "EKS API: the Cluster Autoscaler's DescribeNodegroup (an empty group's template)",
}
