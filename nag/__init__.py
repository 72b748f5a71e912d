"""This project's cdk-nag rule pack, for what cdk-nag does not check on aws_eks_v2 resources."""
