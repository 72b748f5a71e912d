# A bare aws-cdk-lib EKS app, the floor `make bench` compares `cdk synth` with. Copied from the
# project steering folder's shared/bench/bare_eks_app.py (2026-12-01), unchanged below this header.
"""A bare aws-cdk-lib EKS app: the floor that the project's synth time is compared with.

A VPC, an aws_eks_v2 Cluster with the kubectl v36 layer and one managed node group, nothing else.
Synthesize it with the project's venv and CDK CLI, in a scratch folder whose cdk.json reads
{"app": "python bare_eks_app.py"}, and time it beside the project's own `cdk synth` in one run,
alternating the two (the ratio holds when the machine's speed drifts). On 2026-12-01 on the 2-core
machine: project 16.8 s, bare 7.5 s median wall, ratio 2.2 (goal <= 1.5).
"""

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.lambda_layer_kubectl_v36 import KubectlV36Layer

app = cdk.App()
stack = cdk.Stack(app, "bare-eks")
vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
cluster = eks.Cluster(
    stack,
    "Cluster",
    version=eks.KubernetesVersion.of("1.36"),
    vpc=vpc,
    default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
    default_capacity=0,
    kubectl_provider_options=eks.KubectlProviderOptions(
        kubectl_layer=KubectlV36Layer(stack, "Kubectl")
    ),
)
cluster.add_nodegroup_capacity(
    "Gpu", instance_types=[ec2.InstanceType("p5.48xlarge")], min_size=1, max_size=2
)
app.synth()
