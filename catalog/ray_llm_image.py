"""The AWS Ray LLM Deep Learning Container: which tags we know, what they carry, where they live.

Sources (the GA release, not the DLC repository's pre-release build config):
- AWS Deep Learning Containers, Ray LLM changelog (aws.github.io/deep-learning-containers/
  ray-llm/changelog/): "Ray LLM v1.0 - 2026-08-31", tags serve-llm-cuda, serve-llm-cuda-v1,
  serve-llm-cuda-v1.0, serve-llm-cuda-v1.0.0: Ray 2.58.0, vLLM 0.26.0, CUDA 13.0.2, Python 3.13,
  EFA support.
- The Ray LLM DLC page (aws.github.io/deep-learning-containers/ray-llm/), "What's Included": Ray
  2.58.0 with the default, serve and llm extras, installed from upstream wheels; "Images": the
  image is public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda on ECR Public as well.
- NIXL: neither page names it. The image installs ray[llm]==2.58.0, whose wheel metadata pins it
  exactly (ray-2.58.0 METADATA, Requires-Dist: nixl==1.3.1 and nixl-cu13==1.3.1, extra "llm");
  tests/config/test_ray_llm_image_catalog.py reads that pin from the installed ray.
- EFA installer: the GA pages say "EFA" without a version; 1.49.0 is the EFA_VERSION of the
  release's docker/ray_llm/Dockerfile.cuda (aws/deep-learning-containers, Ray 2.58.0 build).
- aws/deep-learning-containers available_images.md, "Region availability" (registry accounts).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RayLlmImage:
    tag: str
    ray_version: str  # the RayService's rayVersion must equal it
    vllm_version: str
    nixl_version: str
    efa_installer_version: str
    cuda_version: str
    python_version: str


# Upgrading the image is one row here (and `serving.image_tag`): rayVersion follows from the tag.
IMAGES: dict[str, RayLlmImage] = {
    image.tag: image
    for image in (
        RayLlmImage(
            tag="serve-llm-cuda-v1.0",
            ray_version="2.58.0",
            vllm_version="0.26.0",
            nixl_version="1.3.1",
            efa_installer_version="1.49.0",
            cuda_version="13.0",
            python_version="3.13",
        ),
    )
}
DEFAULT_IMAGE_TAG = "serve-llm-cuda-v1.0"
# The newest Ray LLM DLC tag AWS has published when this catalog was last checked: the DLC
# changelog's only Ray LLM release, "Ray LLM v1.0 — 2026-08-31" (tags serve-llm-cuda,
# serve-llm-cuda-v1, serve-llm-cuda-v1.0, serve-llm-cuda-v1.0.0; Ray 2.58.0, vLLM 0.26.0).
# `pdctl image` shows it beside the configured tag.
NEWEST_PUBLISHED_TAG = "serve-llm-cuda-v1.0"
NEWEST_PUBLISHED_CHECKED = "2026-12-01"
# What moving to a tag on a newer Ray takes here (docs/operating.md, "Upgrading"): the Ray
# releases after the default image's that change the Serve LLM P/D API.
NEWER_RAYS = ("2.59", "2.60")
NEWER_RAY_MOVE = (
    "the P/D builder's proxy_cls_config and proxy_deployment_config, ignored since Ray 2.55's "
    "decode-as-orchestrator graph, are removed (ray-project/ray#65194): the rendered Serve "
    "config sets neither, and a test keeps it so",
    "LoRA adapters with P/D: this app sets no lora_config; offering it would be a new setting "
    "applied to the prefill and decode LLM configs alike",
    "a catalog row with the tag's versions, requirements-dev.txt's ray[serve] at that Ray (the "
    "Serve schema tests), then make test and make e2e on it",
)
REPOSITORY = "ray"
# ECR Public: the upstream an ECR pull-through cache rule can copy into the user's account.
PUBLIC_REGISTRY = "public.ecr.aws"
PUBLIC_REPOSITORY = "deep-learning-containers/ray"

_STANDARD_ACCOUNT = "763104351884"
# Regions whose DLC registry is not the standard account (available_images.md).
_OTHER_ACCOUNTS = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-3": "364406365360",
    "ap-south-2": "772153158452",
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-7": "590183813437",
    "ca-west-1": "204538143572",
    "eu-central-2": "380420809688",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "mx-central-1": "637423239942",
}
_STANDARD_REGIONS = (
    "us-east-1", "us-east-2", "us-west-1", "us-west-2", "ca-central-1", "sa-east-1",
    "eu-central-1", "eu-west-1", "eu-west-2", "eu-west-3", "eu-north-1",
    "ap-south-1", "ap-southeast-1", "ap-southeast-2", "ap-northeast-1", "ap-northeast-2",
)  # fmt: skip
# GovCloud is left out on purpose: the Ray serve-llm images are not published there.
REGISTRY_ACCOUNTS: dict[str, str] = {
    **dict.fromkeys(_STANDARD_REGIONS, _STANDARD_ACCOUNT),
    **_OTHER_ACCOUNTS,
}


def cached_repository(cache_prefix: str) -> str:
    """The repository a pull-through cache with this prefix makes for the DLC's public copy."""
    return f"{cache_prefix}/{PUBLIC_REPOSITORY}"


def image_uri(
    region: str, tag: str, digest: str | None = None, cache: tuple[str, str] | None = None
) -> str:
    """By tag, or by the tag's digest when one is pinned: the digest names exact bytes, so every
    node of a Ray cluster runs the same image whenever it pulls. ``cache`` is (account, prefix)
    of the account's pull-through cache of ECR Public: the same image, in the user's registry."""
    if cache:
        account, prefix = cache
        repository = f"{account}.dkr.ecr.{region}.amazonaws.com/{cached_repository(prefix)}"
    else:
        repository = f"{REGISTRY_ACCOUNTS[region]}.dkr.ecr.{region}.amazonaws.com/{REPOSITORY}"
    return pinned(repository, tag, digest)


def pinned(repository: str, tag: str, digest: str | None) -> str:
    """The image reference: by digest when one is pinned, else by tag."""
    return f"{repository}@{digest}" if digest else f"{repository}:{tag}"


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


# The versions the app's messages name: those of the image the app deploys by default, so an
# image upgrade is one row above and every message follows it.
DEFAULT_IMAGE = IMAGES[DEFAULT_IMAGE_TAG]
VLLM = f"vLLM {_minor(DEFAULT_IMAGE.vllm_version)}"
RAY = f"Ray {_minor(DEFAULT_IMAGE.ray_version)}"

# Ray Serve LLM's stream batching (the default image's Ray 2.58): a streamed response leaves
# decode's LLMServer in batches, one every this many milliseconds, unless the LLMConfig's
# experimental_configs name another interval under this key
# (ray/llm/_internal/serve/core/server/llm_server.py LLMServer._get_batch_interval_ms; the default
# is MODEL_RESPONSE_BATCH_TIMEOUT_MS in ray/llm/_internal/serve/constants.py, from the
# RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS environment variable, "50" when unset).
STREAM_BATCHING_INTERVAL_KEY = "stream_batching_interval_ms"
RAY_STREAM_BATCHING_INTERVAL_MS = 50.0
