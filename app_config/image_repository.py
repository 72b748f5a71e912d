"""The address of a private image mirror (serving.image_mirror.repository), read by the rules of
the services that consume it, so that a repository a pull would not find is refused at synth.

Two kinds of address:
- an Amazon ECR private repository, as its URI (`<account>.dkr.ecr.<region>.amazonaws.com/<name>`)
  or its ARN (`arn:<partition>:ecr:<region>:<account>:repository/<name>`). The name follows
  ECR's own rule (botocore 1.44.8's ECR model, shape RepositoryName: 2 to 256 characters,
  pattern `[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*(\\/[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*)*`; RegistryId:
  12 digits). Only the IPv4 registry name `dkr.ecr.<region>.amazonaws.com` is taken: it is the
  name the VPC's `ecr.dkr` interface endpoint answers (catalog/vpc_endpoints.py); the dual-stack
  name `<account>.dkr-ecr.<region>.on.aws` takes no PrivateLink traffic (ECR user guide, "Making
  requests to Amazon ECR registries"), so its pulls would bypass the endpoint.
- any other OCI registry, as the image name the container runtime parses: distribution/reference
  (regexp.go, the grammar containerd and the kubelet use): a domain (`host[:port]`, where the
  host has a dot or a port, or is `localhost`, else the runtime reads it as a Docker Hub path)
  and path components `[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*` separated by `/`, at most 255
  characters for the whole name.

Either way the address names the repository only: the tag is serving.image_tag (the catalog
decides what it carries), the digest serving.image_digest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from catalog.regions import REGIONS, partition

# botocore's ECR model (1.44.8), shapes RepositoryName and RegistryId.
ECR_REPOSITORY_NAME = re.compile(
    r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*"
)
ECR_REPOSITORY_NAME_LENGTH = (2, 256)
ECR_REGISTRY_HOST = re.compile(
    r"(?P<account>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com"
)
ECR_REPOSITORY_ARN = re.compile(
    r"arn:(?P<partition>[a-z-]+):ecr:(?P<region>[a-z0-9-]*):(?P<account>[^:]*):repository/(?P<name>.*)"
)
# Host names that are ECR's but not the form above (FIPS, dual-stack, China).
ECR_LOOKALIKE = re.compile(r"(?:^|\.)dkr[.-]ecr(?:-fips)?\.|\.amazonaws\.com\.cn$")
# distribution/reference regexp.go: domainNameComponent, optionalPort, pathComponent.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
REGISTRY_DOMAIN = re.compile(
    rf"(?P<host>{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::(?P<port>[0-9]+))?"
)
PATH = re.compile(
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
NAME_TOTAL_LENGTH_MAX = 255  # distribution/reference NameTotalLengthMax


@dataclass(frozen=True)
class EcrRepository:
    """An ECR private repository: what the ECR API calls it, and where."""

    account: str
    region: str
    name: str

    @property
    def uri(self) -> str:
        return f"{self.account}.dkr.ecr.{self.region}.amazonaws.com/{self.name}"

    @property
    def arn(self) -> str:
        return (
            f"arn:{partition(self.region)}:ecr:{self.region}:{self.account}:repository/{self.name}"
        )


@dataclass(frozen=True)
class ImageRepository:
    """A mirror's repository: its address for an image reference, and its ECR identity when it
    is an ECR repository (None for another registry, which no AWS API can read)."""

    uri: str
    ecr: EcrRepository | None

    @property
    def registry(self) -> str:
        return self.uri.split("/", 1)[0]


class RepositoryAddressError(ValueError):
    """What is wrong with an address, in words a user can act on."""


def parse_image_repository(text: str) -> ImageRepository:
    """The repository an address names, or RepositoryAddressError saying why none."""
    text = text.strip()
    if "://" in text:
        raise RepositoryAddressError(
            "is a URL; give the repository as an image name without a scheme "
            "(<registry>/<path>, e.g. 111122223333.dkr.ecr.us-west-2.amazonaws.com/dlc/ray)"
        )
    if text.startswith("arn:"):
        return ImageRepository(*_from_arn(text))
    registry, slash, path = text.partition("/")
    if not slash or not path:
        raise RepositoryAddressError(
            "names no repository: give <registry>/<path> (an ECR repository URI or ARN, or "
            "another registry's host and path)"
        )
    _no_tag_or_digest(path)
    ecr_host = ECR_REGISTRY_HOST.fullmatch(registry)
    if ecr_host:
        repository = EcrRepository(ecr_host["account"], ecr_host["region"], path)
        _ecr_rules(repository)
        return ImageRepository(repository.uri, repository)
    if ECR_LOOKALIKE.search(registry.lower()):
        raise RepositoryAddressError(
            f"{registry!r} is an ECR registry name this app does not pull from: give "
            "<account>.dkr.ecr.<region>.amazonaws.com (a 12-digit account), the IPv4 name the "
            "VPC's ecr.dkr "
            "interface endpoint answers (the dual-stack dkr-ecr.<region>.on.aws name takes no "
            "PrivateLink traffic; FIPS and China registries are out of this app's scope)"
        )
    return ImageRepository(_other_registry(registry, path), None)


def _from_arn(text: str) -> tuple[str, EcrRepository]:
    match = ECR_REPOSITORY_ARN.fullmatch(text)
    if not match:
        raise RepositoryAddressError(
            "is not an ECR repository ARN: arn:<partition>:ecr:<region>:<account>:repository/<name>"
        )
    if not re.fullmatch(r"[0-9]{12}", match["account"]):
        raise RepositoryAddressError("names an account that is not 12 digits (ECR RegistryId)")
    region = match["region"]
    if region not in REGIONS:
        raise RepositoryAddressError(
            f"names the region {region!r}, which is not an AWS Region this app knows "
            "(catalog/regions.py)"
        )
    if match["partition"] != partition(region):
        raise RepositoryAddressError(
            f"is in partition {match['partition']!r}, but {region} is in {partition(region)!r}"
        )
    _no_tag_or_digest(match["name"])
    repository = EcrRepository(match["account"], region, match["name"])
    _ecr_rules(repository)
    return repository.uri, repository


def _ecr_rules(repository: EcrRepository) -> None:
    if repository.region not in REGIONS:
        raise RepositoryAddressError(
            f"names the region {repository.region!r}, which is not an AWS Region this app knows "
            "(catalog/regions.py)"
        )
    low, high = ECR_REPOSITORY_NAME_LENGTH
    name = repository.name
    if not low <= len(name) <= high or not ECR_REPOSITORY_NAME.fullmatch(name):
        raise RepositoryAddressError(
            f"has the repository name {name!r}, which ECR refuses: {low} to {high} characters, "
            "lower-case letters and digits in components separated by '/', within a component "
            "separated by one '.', '_' or '__', or dashes (ECR API, RepositoryName)"
        )
    if len(repository.uri) > NAME_TOTAL_LENGTH_MAX:
        raise RepositoryAddressError(
            f"makes an image name of {len(repository.uri)} characters with its registry; the "
            f"container runtime takes at most {NAME_TOTAL_LENGTH_MAX} (distribution/reference)"
        )


def _no_tag_or_digest(path: str) -> None:
    if "@" in path or ":" in path:
        raise RepositoryAddressError(
            "carries a tag or digest; give the repository only: the tag is serving.image_tag "
            "and the digest serving.image_digest"
        )


def _other_registry(registry: str, path: str) -> str:
    domain = REGISTRY_DOMAIN.fullmatch(registry)
    takes_domain = domain and (
        "." in domain["host"] or domain["port"] or domain["host"] == "localhost"
    )
    if not takes_domain:
        raise RepositoryAddressError(
            f"starts with {registry!r}, which the container runtime would read as a Docker Hub "
            "path, not a registry: give the registry's host name (with a dot, or a :port) "
            "first (distribution/reference)"
        )
    if not PATH.fullmatch(path):
        raise RepositoryAddressError(
            f"has the path {path!r}, which an image name cannot carry: lower-case letters and "
            "digits in components separated by '/', within a component separated by one '.', "
            "'_' or '__', or dashes (distribution/reference)"
        )
    uri = f"{registry}/{path}"
    if len(uri) > NAME_TOTAL_LENGTH_MAX:
        raise RepositoryAddressError(
            f"is {len(uri)} characters; an image name takes at most {NAME_TOTAL_LENGTH_MAX} "
            "(distribution/reference)"
        )
    return uri
