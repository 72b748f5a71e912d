"""What the nodes need of a mirror that is the user's own ECR pull-through cache
(serving.image_mirror.pull_through_cache): the right to have a pull import a tag the cache does
not hold yet, on exactly that repository.

Pulling itself needs nothing here: the node role's AmazonEC2ContainerRegistryPullOnly (the EKS
user guide's node policy, which the add-on images from EKS's own registries need too) grants
ecr:GetAuthorizationToken, ecr:BatchGetImage and ecr:GetDownloadUrlForLayer on every
repository, so a statement naming the mirror would narrow nothing. A repository of another
account admits the pull only if its repository policy allows this role as well (synth warns:
image-mirror-other-account).

Why only ecr:BatchImportUpstreamImage: a pull through a cache imports with it (ECR user guide,
"IAM permissions required to sync an upstream registry"); ecr:CreateRepository, the other
action that page lists, is needed only when the first pull creates the repository, and
`pdctl preflight` requires the mirror's repository to exist. The managed policy may list
ecr:BatchImportUpstreamImage as well (on every repository): its full action list could not be
read when this was written (a truncated copy of the AWS managed policy reference shows a fourth
action after the three above). The statement stays explicit either way: it is what this
feature needs, named on exactly the repository, and does not depend on the managed policy's
next version.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam

from app_config.image_repository import EcrRepository
from constructs import Construct

IMPORT_ACTIONS = ("ecr:BatchImportUpstreamImage",)


class ImageMirrorImport(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        repository: EcrRepository,
        node_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        node_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PullThroughImageMirror",
                actions=list(IMPORT_ACTIONS),
                resources=[repository.arn],
            )
        )
