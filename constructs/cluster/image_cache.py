"""The Ray LLM image in the account's own registry, where it can be scanned: an ECR pull-through
cache rule with ECR Public upstream (AWS publishes the DLC there too), a creation template for
the repositories it makes, and the registry's scanning rule for them.

Why a pull-through cache and not a copy: ECR documents ECR Public as an upstream that needs no
credentials (ECR user guide, "Sync an upstream registry with an Amazon ECR private registry"),
the first pull creates the repository and later pulls by tag refresh it from upstream (ECR
tries at least once every 24 hours), so following AWS's patch releases needs no pipeline of
ours. Nodes need two more actions to trigger it (ecr:BatchImportUpstreamImage,
ecr:CreateRepository: ECR user guide, "IAM permissions required to sync an upstream registry"),
on the cache's repositories only.

What the cache cannot do (aws/containers-roadmap#2837, open): import an image on a first pull by
digest, even with the tag in the reference (`repo:tag@digest`). A pinned
serving.image_digest therefore works only once a pull by tag has imported that build: `pdctl
preflight` checks that it is in the cache, and synth warns.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam

from app_config.serving import ImageCache as ImageCacheSettings
from catalog.ray_llm_image import PUBLIC_REGISTRY
from constructs import Construct
from constructs.common.nag_acknowledgments import account_arn, acknowledge

SCAN_FREQUENCY = {"enhanced": "CONTINUOUS_SCAN", "basic": "SCAN_ON_PUSH"}


class ImageCache(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: ImageCacheSettings,
        prefix: str,
        node_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.repository_prefix = settings.repository_prefix(prefix)
        ecr.CfnPullThroughCacheRule(
            self,
            "Rule",
            ecr_repository_prefix=self.repository_prefix,
            upstream_registry="ecr-public",
            upstream_registry_url=PUBLIC_REGISTRY,
        )
        ecr.CfnRepositoryCreationTemplate(
            self,
            "Template",
            prefix=self.repository_prefix,
            applied_for=["PULL_THROUGH_CACHE"],
            description="Repositories the Ray LLM image's pull-through cache creates",
            # The cache moves the tag when AWS republishes it.
            image_tag_mutability="MUTABLE",
            encryption_configuration=ecr.CfnRepositoryCreationTemplate.EncryptionConfigurationProperty(
                encryption_type="AES256"
            ),
            # No lifecycle policy. When AWS republishes the tag, the build a cluster pins
            # (serving.image_digest, which `pdctl image` proposes from what the pods run)
            # becomes untagged, and an ECR lifecycle rule cannot select an image by digest:
            # every rule that reaches untagged images, by age, count or last pull, deletes it in
            # time and the next node that joins fails to pull it
            # (tests/stacks/test_image_cache.py evaluates ECR's rules).
            # The template applies once, when the cache creates the repository, so it must be
            # safe for every later configuration. Superseded builds are removed by hand
            # (docs/operating.md, "Scanning the image in your account").
        )
        if settings.scanning != "unchanged":
            ecr.CfnRegistryScanningConfiguration(
                self,
                "Scanning",
                scan_type=settings.scanning.upper(),
                rules=[
                    ecr.CfnRegistryScanningConfiguration.ScanningRuleProperty(
                        scan_frequency=SCAN_FREQUENCY[settings.scanning],
                        repository_filters=[
                            ecr.CfnRegistryScanningConfiguration.RepositoryFilterProperty(
                                filter=f"{self.repository_prefix}/*", filter_type="WILDCARD"
                            )
                        ],
                    )
                ],
            )
        repositories = account_arn(stack, "ecr", f"repository/{self.repository_prefix}/*")
        node_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PullThroughImageCache",
                actions=["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"],
                resources=[repositories.arn],
            )
        )
        acknowledge(
            node_role,
            repositories.finding,
            "The repositories the image's pull-through cache creates under its own prefix (the "
            "upstream repository's path below it is ECR Public's, not ours to name); only "
            "BatchImportUpstreamImage and CreateRepository, which a first pull needs.",
        )
