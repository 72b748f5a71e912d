"""Serving settings: the model, the Ray LLM image, the prefill/decode engines, the endpoint."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from app_config import engine_options
from app_config.endpoint_health import seconds_until_new_targets_healthy
from app_config.ingress import Ingress
from app_config.node_labels import GPU_ROLES
from app_config.scaling import Scaling
from app_config.section import (
    CidrBlock,
    Section,
    int_from_text,
    listed_once,
    matching,
    one_of,
    require_consent_for_anywhere,
    require_internet_sources,
)
from catalog.expert_parallel import ALL2ALL_BACKENDS, SUPPORTED_ALL2ALL_BACKENDS
from catalog.helm_charts import CHARTS
from catalog.ray_llm_image import (
    DEFAULT_IMAGE_TAG,
    IMAGES,
    RAY,
    RAY_STREAM_BATCHING_INTERVAL_MS,
    VLLM,
)

# KubeRay accepts 47 (MaxRayServiceNameLength = 53 - 6). Worker pods are named
# "<cluster>-<group>-worker-<id>" with "<cluster>-<group>" cut at 50 characters
# (ray-operator utils.PodName) and the cluster named "<name>-<5 chars>": beyond 36, "prefill"
# would be cut off, and the dashboard finds each side's pods by that word.
RAYSERVICE_NAME_MAX = 50 - len("-xxxxx-") - max(len(role) for role in GPU_ROLES)
_DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DNS_LABEL_RULE = "lower-case letters, digits and '-', starting with a letter, not ending with '-'"
_S3_URI = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/(?P<prefix>[^*?]*))?")
# Namespaces the serving namespace must never be: Kubernetes' own, EKS add-ons', and those the
# stack's Helm charts own. The namespace gets PSA labels and a deny-all policy, and `cdk destroy`
# deletes it.
RESERVED_NAMESPACES = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", "amazon-cloudwatch"}
    | {chart.namespace for chart in CHARTS}
)
# Inbound rules per security group (VPC quota default): one rule per client CIDR.
SECURITY_GROUP_RULES_MAX = 60
# The complete ARN, with the 6-character suffix Secrets Manager appends: IAM matches it exactly.
_SECRET_ARN = (
    r"^arn:aws(-us-gov)?:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+-[A-Za-z0-9]{6}$"
)
# Ray's Batcher takes any interval >= 0 (a negative one would time out at once and spin); past a
# second the first token of every stream waits that long, which no interactive client accepts.
STREAM_BATCHING_INTERVAL_MAX_MS = 1000


# What S3 refuses in general purpose bucket names beyond their characters and length (S3 user
# guide, "General purpose bucket naming rules").
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_IP_ADDRESS = re.compile(r"\d{1,3}(\.\d{1,3}){3}")


def _bucket_name_problem(bucket: str) -> str:
    if ".." in bucket:
        return f"bucket {bucket!r} has two adjacent periods"
    if _IP_ADDRESS.fullmatch(bucket):
        return f"bucket {bucket!r} is formatted as an IP address"
    reserved = next((p for p in _BUCKET_RESERVED_PREFIXES if bucket.startswith(p)), None)
    reserved = reserved or next((s for s in _BUCKET_RESERVED_SUFFIXES if bucket.endswith(s)), None)
    if reserved:
        return f"bucket {bucket!r} uses {reserved!r}, which S3 reserves"
    return ""


class Model(Section):
    """Where the weights come from: a Hugging Face repository, or an S3 copy read through IRSA."""

    id: str = Field(
        "Qwen/Qwen3-32B",
        # huggingface_hub validate_repo_id: namespace/name of letters, digits, '_', '-', '.',
        # neither part starting or ending with '-' or '.', the name at most 96 characters, no
        # '--' or '..' anywhere and no '.git' ending.
        **matching(
            r"^[A-Za-z0-9_]([\w.-]*[A-Za-z0-9_])?/[A-Za-z0-9_]([\w.-]{0,94}[A-Za-z0-9_])?$",
            "a Hugging Face model id, org/name: letters, digits, '_', '-', '.', neither part "
            "starting or ending with '-' or '.', no '--' or '..', the name at most 96 characters "
            "(huggingface_hub validate_repo_id)",
        ),
        description="Hugging Face model id (org/name); also the name clients send as `model`. "
        f"The default is ungated (Apache-2.0), supported by {VLLM} and fits every P-class "
        "catalog instance at TP=8; its 64 GB of bf16 weights do not fit the smaller G6/G6e "
        "sizes (examples/trial-g6e.yaml picks a model that does; `pdctl plan` checks a fit).",
    )
    s3_uri: str | None = Field(
        None,
        # s3:// + a bucket name (at most 63) + '/' + an object key prefix (at most 1024 bytes).
        max_length=len("s3://") + 63 + 1 + 1024,
        description="s3://bucket/prefix holding the model files; the Ray pods get read-only "
        "access to exactly that prefix.",
    )
    config_file: str | None = Field(
        None,
        max_length=1024,
        description="The model's config.json (a path on the machine that runs `cdk synth`), for "
        "the rules that need the model: context length, the parallel layout (TP against the "
        "attention and KV heads, data and expert parallel only for MoE, experts over the "
        "EPLB ranks), weights per GPU and KV room, the quantization option against the "
        "checkpoint's. A regular file of at most 10 MB holding a JSON object whose sizes, "
        "context lengths and RoPE factor, where given, are positive numbers (`pdctl plan "
        "--model-config` reads it the same way). Unset: "
        "the copy the app bundles for a model it knows (catalog/model_configs), else synth warns "
        "that these were not checked (model-unchecked).",
    )
    hf_token_secret_arn: str | None = Field(
        None,
        **matching(
            _SECRET_ARN,
            (
                "the full ARN of a Secrets Manager secret, including the 6-character suffix"
                " Secrets Manager appends "
                "(arn:aws:secretsmanager:<region>:<account>:secret:<name>-AbCdEf)"
            ),
        ),
        description="Secrets Manager secret with a Hugging Face token, for gated models. Mounted "
        "by the Secrets Store CSI driver; never in CloudFormation.",
    )

    @field_validator("id")
    @classmethod
    def _hub_repo_id(cls, value: str) -> str:
        if "--" in value or ".." in value or value.endswith(".git"):
            raise ValueError(
                "the Hugging Face Hub refuses repository ids with '--' or '..' or ending in "
                "'.git' (huggingface_hub validate_repo_id)"
            )
        return value

    @field_validator("s3_uri")
    @classmethod
    def _s3_uri(cls, value: str | None) -> str | None:
        if value is not None and ("*" in value or "?" in value):
            raise ValueError(
                "wildcards are not allowed: the pods are granted exactly this prefix; name the "
                "model's folder, s3://bucket/path/to/model"
            )
        if value is not None and not _S3_URI.fullmatch(value):
            raise ValueError(
                "not an S3 URI; expected s3://bucket/prefix (bucket 3-63 chars a-z 0-9 . -)"
            )
        bucket_problem = _bucket_name_problem(_S3_URI.fullmatch(value)["bucket"]) if value else ""
        if bucket_problem:
            raise ValueError(f"{bucket_problem} (S3 bucket naming rules)")
        if value is not None and not (_S3_URI.fullmatch(value)["prefix"] or "").strip("/"):
            raise ValueError(
                "names a whole bucket; the pods are granted exactly this prefix, so name the "
                "model's folder, s3://bucket/path/to/model"
            )
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Model:
        if self.s3_uri and self.hf_token_secret_arn:
            raise ValueError(
                "hf_token_secret_arn applies to Hugging Face downloads only; with s3_uri set the "
                "weights come from S3, so remove hf_token_secret_arn"
            )
        return self

    @property
    def s3_bucket(self) -> str | None:
        return _S3_URI.fullmatch(self.s3_uri)["bucket"] if self.s3_uri else None

    @property
    def s3_prefix(self) -> str:
        return ((_S3_URI.fullmatch(self.s3_uri)["prefix"] or "") if self.s3_uri else "").strip("/")


class ReplicaAutoscaling(Section):
    """Ray Serve's autoscaling of one side (AutoscalingConfig, Ray 2.58). Serve LLM's own default
    target is 1e9 ongoing requests per replica (ray.llm builder DEFAULT_DEPLOYMENT_OPTIONS): a
    side would never scale on load unless a target is set, so one always is."""

    target_ongoing_requests: float = Field(
        8,
        gt=0,
        le=4096,
        description="Requests in flight per replica Serve aims for: more and it adds replicas, "
        "fewer and it removes them.",
    )
    upscale_delay_s: float = Field(
        30, ge=0, le=3600, description="How long load must stay above target before adding."
    )
    downscale_delay_s: float = Field(
        600, ge=0, le=86400, description="How long load must stay below target before removing."
    )


_ON_EFA = " or ".join(repr(name) for name in SUPPORTED_ALL2ALL_BACKENDS)


def _all2all_on_efa(backend: str) -> str:
    if backend not in ALL2ALL_BACKENDS:
        raise ValueError(
            f"not an all-to-all backend of {VLLM} (vllm/config/parallel.py All2AllBackend); "
            f"on EFA use {_ON_EFA}"
        )
    reason = ALL2ALL_BACKENDS[backend]
    if reason:
        raise ValueError(f"{reason} (on EFA the image runs {_ON_EFA})")
    return backend


class ExpertLoadBalancing(Section):
    """vLLM's expert-parallel load balancer (EPLB): it counts the tokens each expert receives and
    every step_interval steps moves expert weights between ranks (optionally with redundant
    copies of the busiest experts). On EFA the moves go over NCCL (catalog/expert_parallel.py)."""

    enabled: bool = Field(
        False,
        description="Rebalance experts across the side's expert-parallel ranks (vLLM "
        "enable_eplb). Needs expert_parallel and more than one rank (TP x DP > 1).",
    )
    num_redundant_experts: int = Field(
        0,
        ge=0,
        le=1024,
        description="Extra expert copies spread over the ranks (each costs one expert's weights "
        "per rank that holds it); vLLM refuses them without EPLB.",
    )
    window_size: int = Field(
        1000, ge=1, le=1_000_000, description="Steps of expert load EPLB remembers."
    )
    step_interval: int = Field(
        3000, ge=1, le=1_000_000, description="Steps between two rebalancings."
    )

    @model_validator(mode="after")
    def _redundant_needs_eplb(self) -> ExpertLoadBalancing:
        if self.num_redundant_experts and not self.enabled:
            raise ValueError(
                f"num_redundant_experts {self.num_redundant_experts} without enabled: true; "
                f"{VLLM} refuses redundant experts without EPLB (ParallelConfig); enable EPLB "
                "or set num_redundant_experts to 0"
            )
        return self


class Engine(Section):
    """One side's vLLM engine and Serve replicas. One rank spans TP x PP GPUs of one node; a
    replica is data_parallel_size ranks (one, unless the side runs attention data parallel)."""

    tensor_parallel_size: int | None = Field(
        None, ge=1, le=64, description="GPUs per pipeline stage; default: all GPUs of a node."
    )
    pipeline_parallel_size: int = Field(1, ge=1, le=8, description="Pipeline stages per replica.")
    gpu_memory_utilization: float = Field(
        0.90, gt=0.1, le=0.98, description="Share of each GPU's memory vLLM may use."
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        le=1024,
        description="Attention data-parallel ranks per replica (vLLM data_parallel_size), each "
        "a Serve replica of TP x PP GPUs: above 1 a replica is a DP group that Ray Serve "
        "gang-schedules, scales and restarts as a whole (one failing rank restarts every rank), "
        f"and it may span nodes. MoE models only: {VLLM} refuses data parallel for a "
        "dense model at engine start (Ray's DP ranks run in vLLM's external DP mode); synth "
        "refuses it where the model's config.json is known (model-dense-data-parallel), as "
        "`pdctl plan` does.",
    )
    expert_parallel: bool = Field(
        False,
        description="Split each MoE layer's experts over the replica's TP x DP ranks instead "
        "of splitting every expert by TP (vLLM enable_expert_parallel); no effect on a dense "
        "model.",
    )
    all2all_backend: Annotated[str, AfterValidator(_all2all_on_efa)] = Field(
        SUPPORTED_ALL2ALL_BACKENDS[0],
        description="How expert-parallel ranks exchange tokens (vLLM all2all_backend). On EFA "
        "the image runs 'allgather_reducescatter' (NCCL collectives over aws-ofi-nccl); the "
        "others are refused with the reason (docs/architecture.md, 'Expert parallel on EFA').",
    )
    eplb: ExpertLoadBalancing = Field(
        ExpertLoadBalancing(), description="Expert-parallel load balancing (vLLM EPLB)."
    )
    min_replicas: int = Field(
        1,
        ge=0,
        le=64,
        description="Serve autoscaling lower bound, in replicas (DP groups when "
        "data_parallel_size > 1). Prefill may be 0 (the first request after idle waits for "
        "nodes and an engine load); decode at least 1: it receives requests.",
    )
    max_replicas: int = Field(
        1,
        ge=1,
        le=64,
        description="Serve autoscaling upper bound, in replicas (DP groups when "
        "data_parallel_size > 1).",
    )
    autoscaling: ReplicaAutoscaling = Field(
        ReplicaAutoscaling(),
        description="How Serve turns this side's request load into replicas (between "
        "min_replicas and max_replicas).",
    )
    request_router: Literal["power_of_two", "prefix_affinity"] = Field(
        "power_of_two",
        description="How Serve picks this side's replica for a request: 'power_of_two' (Serve's "
        "default: the less loaded of two random replicas) or 'prefix_affinity' (the app's "
        "PrefixAffinityRouter, serve_extensions/prefix_router.py: the replica that was sent "
        "the longest prefix of the prompt, while its load stays within 1.25x the mean; the "
        "prefill default). Ray Serve LLM's PrefixCacheAffinityRouter ('prefix_cache_affinity') "
        f"is refused: in {RAY} it stalls under concurrency (docs/operating.md, 'Cache-aware "
        "routing'). Ray's KV-event router (KVAwareRouter) is not offered: it needs ai-dynamo, "
        "which the image does not ship.",
    )

    @field_validator("request_router", mode="before")
    @classmethod
    def _not_rays_prefix_router(cls, value: Any) -> Any:
        if value == "prefix_cache_affinity":
            raise ValueError(
                f"'prefix_cache_affinity' (Serve LLM's PrefixCacheAffinityRouter, {RAY}) "
                "loses requests under concurrency: it lacks Serve's FIFO fulfilment, so routing "
                "turns spin and flood the replicas with queue-length probes (docs/"
                "operating.md, 'Cache-aware routing'); use 'prefix_affinity', the app's "
                "prefix-aware router"
            )
        return value

    kv_offload_gib_per_gpu: int = Field(
        0,
        ge=0,
        le=1024,
        description="GiB of the node's memory per GPU that keep KV blocks evicted from GPU "
        f"memory, so that a prompt seen before is read back instead of computed again ({VLLM}'s "
        "OffloadingConnector, composed with NIXL by its MultiConnector; docs/operating.md, "
        "'KV offload on prefill'). Prefill only: decode reads every prompt's KV from prefill. "
        "0: off. The worker pod's memory request and limit grow by it times the node's GPUs "
        "(pinned memory is charged to the pod), and synth refuses a size the node's "
        "allocatable memory cannot hold beside the pods already there.",
    )
    engine_options: dict[str, Any] = Field(
        {},
        description=f"vLLM engine options for this side only ({VLLM} names: "
        "kv_cache_dtype, max_num_seqs, max_num_batched_tokens, enable_prefix_caching, "
        "quantization, tool_call_parser, reasoning_parser, ...), over serving.engine_options. "
        "Checked against the image's vLLM argument list (catalog/vllm_engine_args.json); the "
        "options this project sets (parallelism, KV transfer, block size, model, context "
        "length) are refused with the setting to use instead.",
    )

    @model_validator(mode="after")
    def _replicas(self) -> Engine:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) must not exceed max_replicas "
                f"({self.max_replicas})"
            )
        return self

    @model_validator(mode="after")
    def _eplb_needs_expert_parallel(self) -> Engine:
        if self.eplb.enabled and not self.expert_parallel:
            raise ValueError(
                f"eplb.enabled without expert_parallel: {VLLM} balances experts only across "
                "expert-parallel ranks (ParallelConfig: 'enable_expert_parallel must be True to "
                "use EPLB'); set expert_parallel: true or disable eplb"
            )
        return self


def _prefill_engine() -> Engine:
    """Prefill holds a request only for its prompt's forward pass, and its load comes in bursts
    (long prompts arrive together): a few requests per replica, added after 10 s, kept for 5
    minutes so that the next burst finds them loaded. Routing is prefix-aware: prefill computes
    the prompt, so a replica that computed its prefix before skips that part (vLLM's prefix
    cache); on the local Ray it routed 64 requests at once with no routing wait over Serve's
    probe deadline, at power-of-two's median latency (docs/operating.md, "Cache-aware
    routing")."""
    return Engine(
        autoscaling=ReplicaAutoscaling(
            target_ongoing_requests=4, upscale_delay_s=10, downscale_delay_s=300
        ),
        request_router="prefix_affinity",
    )


def _decode_engine() -> Engine:
    """Decode holds a request for its whole answer and batches many (continuous batching): a
    higher target per replica, a steady load that needs no quick reaction (60 s) and replicas
    kept 10 minutes (an engine takes minutes to load). Decode consults its own prefix cache and
    pulls from prefill only the rest (vLLM 0.26 nixl/pull_scheduler.py), so affinity there saves
    transfer, not computation: balancing its long streams (power-of-two) comes first
    (docs/operating.md, "Affinity on decode, for multi-turn")."""
    return Engine(
        autoscaling=ReplicaAutoscaling(
            target_ongoing_requests=32, upscale_delay_s=60, downscale_delay_s=600
        )
    )


class KvTransfer(Section):
    backend: Literal["LIBFABRIC", "UCX"] = Field(
        "LIBFABRIC",
        description="NIXL backend. LIBFABRIC uses EFA; UCX on EFA silently falls back to a slow "
        "path (synth warns).",
    )
    block_size: Annotated[Literal[16, 32, 64, 128], BeforeValidator(int_from_text)] = Field(
        128,
        description="vLLM KV block size in tokens, the same on both sides: larger blocks mean "
        "fewer, larger RDMA reads per request.",
    )


class Endpoint(Section):
    authentication: Literal["iam", "none"] = Field(
        "iam",
        description="iam: callers sign requests (SigV4, execute-api:Invoke) to an API Gateway "
        "REST API that streams responses over HTTPS with AWS's certificate, private to the VPC "
        "for an internal scheme. none: the load balancer's own listener, no authentication "
        "(TCP, or TLS with certificate_arn), open only to the clients you name.",
    )
    scheme: Literal["internal", "internet-facing"] = Field(
        "internal",
        description="Who can reach the API at all: internal (the VPC; with iam, a private API "
        "through an execute-api VPC endpoint) or internet-facing (source_cidrs only; with iam, "
        "a regional API).",
    )
    certificate_arn: str | None = Field(
        None,
        **matching(
            r"^arn:aws(-us-gov)?:acm:[a-z0-9-]+:\d{12}:certificate/[0-9a-f-]{36}$",
            "an ACM certificate ARN (arn:aws:acm:<region>:<account>:certificate/<uuid>)",
        ),
        description="authentication none: the load balancer listens with TLS on 443 instead of "
        "TCP on 80. Required for internet-facing.",
    )
    client_security_group_ids: Annotated[list[str], listed_once("security group")] = Field(
        [],
        description="Security groups of the clients (internal scheme): with iam, the API's VPC "
        "endpoint admits them (the VPC when none are named, IAM deciding who); with none, the "
        "load balancer admits them.",
    )
    source_cidrs: Annotated[list[CidrBlock], listed_once("CIDR")] = Field(
        [],
        description="Client CIDRs. Internet-facing: required. Internal: admitted beside "
        "client_security_group_ids.",
    )
    allow_from_anywhere: bool = Field(
        False, description="Explicit consent to 0.0.0.0/0 in source_cidrs."
    )

    @property
    def load_balancer_internet_facing(self) -> bool:
        """Behind the signed API the load balancer stays internal; the scheme decides the
        API's type."""
        return self.scheme == "internet-facing" and self.authentication != "iam"

    @property
    def port(self) -> int:
        """The load balancer's listener (behind the API with iam)."""
        return 443 if self.certificate_arn else 80

    @field_validator("client_security_group_ids")
    @classmethod
    def _security_groups(cls, values: list[str]) -> list[str]:
        for group in values:
            if not re.fullmatch(r"sg-[0-9a-f]{8}(?:[0-9a-f]{9})?", group):
                raise ValueError(f"{group!r} is not a security group id (sg-0123456789abcdef0)")
        return values

    @model_validator(mode="after")
    def _sources(self) -> Endpoint:
        if self.scheme == "internet-facing" and not self.source_cidrs:
            raise ValueError(
                "an internet-facing endpoint needs source_cidrs (the clients' CIDRs); use scheme "
                "'internal' to keep it inside the VPC"
            )
        if self.scheme == "internet-facing" and self.client_security_group_ids:
            raise ValueError(
                "client_security_group_ids admit clients inside the VPC; an internet-facing "
                "endpoint admits source_cidrs"
            )
        if self.authentication == "iam" and self.certificate_arn:
            raise ValueError(
                "certificate_arn is for authentication 'none' (the load balancer's own TLS "
                "listener); with 'iam' API Gateway serves HTTPS with AWS's certificate"
            )
        if self.authentication == "none":
            if self.scheme == "internet-facing" and not self.certificate_arn:
                raise ValueError(
                    "an internet-facing endpoint with authentication 'none' needs certificate_arn "
                    "(an ACM certificate): prompts and completions must not cross the internet "
                    "in clear text; or use authentication 'iam' (HTTPS, signed requests)"
                )
            if not (self.client_security_group_ids or self.source_cidrs):
                raise ValueError(
                    "authentication 'none' admits only the clients you name: set "
                    "client_security_group_ids (or source_cidrs), or use authentication 'iam'"
                )
        require_consent_for_anywhere(
            self.source_cidrs, self.allow_from_anywhere, "allow_from_anywhere", "the model endpoint"
        )
        if self.scheme == "internet-facing":
            require_internet_sources(
                self.source_cidrs, "an internet-facing endpoint", SECURITY_GROUP_RULES_MAX
            )
        elif (
            len(self.source_cidrs) + len(self.client_security_group_ids) > SECURITY_GROUP_RULES_MAX
        ):
            raise ValueError(
                f"{len(self.source_cidrs) + len(self.client_security_group_ids)} CIDRs and "
                f"security groups; the endpoint's security group takes at most "
                f"{SECURITY_GROUP_RULES_MAX} rules"
            )
        return self


# ElastiCache node families no new cluster can use (ElastiCache user guide, "Supported node
# types"): the previous generation ("creation of new clusters is not supported for these
# types") and T2 ("You will no longer be able to create new ElastiCache clusters using T2").
RETIRED_CACHE_FAMILIES = ("t1", "t2", "m1", "m2", "m3", "c1", "r3")


class GcsFaultTolerance(Section):
    """Ray GCS state in ElastiCache for Valkey, so a restarted head resumes the running cluster
    instead of restarting every Serve replica (and reloading the model) with it."""

    enabled: bool = Field(
        False,
        description="Keep GCS state in ElastiCache for Valkey (TLS, AUTH token, private "
        "subnets, Multi-AZ).",
    )
    node_type: str = Field(
        "cache.r7g.large",
        **matching(
            r"^cache\.[a-z0-9]+\.[a-z0-9]+$", "an ElastiCache node type such as cache.r7g.large"
        ),
        description="ElastiCache node type of the primary and each replica. r6gd nodes get "
        "data tiering (DataTieringEnabled), which ElastiCache requires of them.",
    )
    engine_version: Literal["7.2", "8.0", "8.1"] = Field(
        "8.1", description="Valkey engine version."
    )
    replicas: int = Field(
        1,
        ge=1,
        le=5,
        description="Read replicas beside the primary; at least one, in another zone, so the "
        "store survives a zone or node failure (automatic failover).",
    )

    @property
    def data_tiering(self) -> bool:
        """r6gd nodes tier data to their SSDs, and a replication group of them must say so:
        AWS::ElastiCache::ReplicationGroup DataTieringEnabled "must be set to true when using
        r6gd nodes" (the only family with data tiering; ElastiCache user guide, "Data tiering")."""
        return self.node_type.split(".")[1] == "r6gd"

    @field_validator("node_type")
    @classmethod
    def _current_generation(cls, value: str) -> str:
        family = value.split(".")[1]
        if family in RETIRED_CACHE_FAMILIES:
            raise ValueError(
                f"{family} is a node family ElastiCache no longer creates clusters of (previous "
                "generation, or T2); use a current one such as cache.r7g.large or cache.t4g.medium"
            )
        return value


class ImageCache(Section):
    """A copy of the Ray LLM image in your own registry, where ECR or Amazon Inspector scans it:
    an ECR pull-through cache rule with ECR Public (where AWS also publishes the DLC) upstream."""

    enabled: bool = Field(
        False,
        description="Pull the image through a pull-through cache rule in this account instead "
        "of from AWS's DLC registry. Costs ECR storage for the cached image (20+ GB) and, with "
        "enhanced scanning, Amazon Inspector's per-image scan charges.",
    )
    scanning: Literal["unchanged", "enhanced", "basic"] = Field(
        "unchanged",
        description="Registry scanning for the cache's repositories: 'unchanged' (default: "
        "leave the account's registry scanning configuration as it is), 'enhanced' (Amazon "
        "Inspector, continuous: rescans when new CVEs are published) or 'basic' (ECR, on "
        "push). 'enhanced' and 'basic' replace the registry's scanning configuration, one per "
        "account and region, and need replace_registry_scanning: true.",
    )
    replace_registry_scanning: bool = Field(
        False,
        validate_default=True,  # the default (no consent) must be checked against scanning
        description="Explicit consent for scanning 'enhanced' or 'basic': the stack then owns "
        "this account's registry scanning configuration in the region (rules you have for "
        "other repositories are replaced), and `cdk destroy` does not restore it: the registry "
        "falls back to basic scanning without rules.",
    )

    @field_validator("replace_registry_scanning")
    @classmethod
    def _consent_to_account_wide_scanning(cls, consent: bool, info: ValidationInfo) -> bool:
        scanning = info.data.get("scanning", "unchanged")
        if info.data.get("enabled") and scanning != "unchanged" and not consent:
            raise ValueError(
                f"scanning {scanning!r} replaces this account's ECR registry scanning "
                "configuration in the region (one per registry: rules for other repositories "
                "are lost) and `cdk destroy` leaves basic scanning without rules; set "
                "replace_registry_scanning: true to consent, or keep scanning 'unchanged' and "
                "add a rule for the cache's repositories yourself"
            )
        return consent

    def repository_prefix(self, prefix: str) -> str:
        """The cache's repository namespace (ECR: 2-30 characters)."""
        return f"{prefix}-dlc"


class ImageMirror(Section):
    """The Ray LLM image from a registry you run instead of AWS's DLC registry: an ECR
    repository (this account or another, this region or another) that mirrors the DLC under its
    tags, or another OCI registry. The stack creates nothing for it; `pdctl preflight` checks an
    ECR mirror before a deploy (docs/operating.md, "A private image mirror")."""

    repository: str = Field(
        description="The mirror's repository, without tag or digest: an ECR repository URI "
        "(<account>.dkr.ecr.<region>.amazonaws.com/<name>) or ARN "
        "(arn:aws:ecr:<region>:<account>:repository/<name>), or another registry's "
        "<host>[:port]/<path>. It must carry serving.image_tag's builds under the same tag "
        "(serving.image_digest, when set, is pulled from it by digest).",
    )
    pull_through_cache: bool = Field(
        False,
        description="ECR only: the repository is made by a pull-through cache rule of yours. "
        "The node role then gets ecr:BatchImportUpstreamImage on exactly this repository (a "
        "pull of a tag the cache lacks imports it); a pinned digest must already be in it.",
    )
    require_clean_scan: bool = Field(
        False,
        description="ECR only: `pdctl preflight` fails while ECR or Amazon Inspector reports "
        "critical or high findings for the image (the pinned digest, else the tag), and "
        "cannot decide without a finished scan. Scanning itself is the mirror's registry "
        "configuration, which this app leaves alone.",
    )


class RayAutoscaler(Section):
    """KubeRay's in-tree Ray autoscaler (a sidecar of the Ray head): a worker pod per pending
    placement group of Serve replicas, up to the node group's max_size."""

    idle_timeout_seconds: int = Field(
        300,
        ge=30,
        le=86400,
        description="How long a Ray worker without any Serve replica (or other work) stays "
        "before Ray removes its pod; its node then goes after the Cluster Autoscaler's "
        "scale_down_unneeded_minutes. Longer keeps a warm node for the next burst.",
    )


class Serving(Section):
    namespace: str = Field(
        "llm-serving",
        **matching(_DNS_LABEL, _DNS_LABEL_RULE),
        max_length=63,
        description="Kubernetes namespace.",
    )
    name: str = Field(
        "pd-llm",
        **matching(_DNS_LABEL, _DNS_LABEL_RULE),
        description=f"RayService name (at most {RAYSERVICE_NAME_MAX} characters, so that KubeRay's "
        "pod names keep the worker group's name; without 'prefill' or 'decode' in it).",
    )
    image_tag: Annotated[
        str, one_of(IMAGES, "a known Ray LLM image tag", " (add one to catalog/ray_llm_image.py)")
    ] = Field(DEFAULT_IMAGE_TAG, description=f"Ray LLM DLC tag, one of: {', '.join(IMAGES)}.")
    image_digest: str | None = Field(
        None,
        **matching(
            r"^sha256:[0-9a-f]{64}$",
            "an image digest: sha256: followed by 64 lower-case hexadecimal digits",
        ),
        description="The digest image_tag pointed to when you checked it (`aws ecr "
        "batch-get-image` or `docker buildx imagetools inspect`); when set, pods pull exactly "
        "these bytes, so a node that joins later cannot run a newer patch release of the tag. "
        "Changing it rolls out as a new Ray cluster.",
    )
    upgrade_strategy: Literal["NewCluster", "None"] = Field(
        "NewCluster",
        description="NewCluster: a change of the image or of any serving setting (every one "
        "restarts the engines, replica bounds included) starts a second Ray cluster, which "
        "joins the endpoint once its Serve application runs; its GPU nodes come from the "
        "Cluster Autoscaler (max_size must leave room). None: every Serve config "
        "change applies in place (engines reload while nothing serves); image changes need a "
        "manual restart.",
    )
    image_cache: ImageCache = Field(
        ImageCache(), description="A scanned copy of the image in your account's registry."
    )
    image_mirror: ImageMirror | None = Field(
        None,
        description="Pull the image from your own mirror instead of AWS's DLC registry (unset: "
        "the DLC registry, or serving.image_cache).",
    )
    model: Model = Field(Model(), description="The model to serve.")
    max_model_len: int = Field(32768, ge=512, le=1048576, description="Context length in tokens.")
    kv_transfer: KvTransfer = Field(KvTransfer(), description="How decode reads prefill's KV.")
    ray_autoscaler: RayAutoscaler = Field(
        RayAutoscaler(), description="Ray's autoscaler: Serve replicas to worker pods."
    )
    engine_options: dict[str, Any] = Field(
        {},
        description="vLLM engine options for both sides (docs/configuration.md, 'Engine "
        "options'). Options that NIXL or the prefill/decode hand-over needs equal "
        "(kv_cache_dtype, dtype, attention_backend, tokenizer, chat template, tool calling, ...) "
        "belong here.",
    )
    prefill: Engine = Field(_prefill_engine(), description="Prefill engines.")
    decode: Engine = Field(_decode_engine(), description="Decode engines.")
    scaling: Scaling = Field(
        Scaling(),
        description="How prefill and decode replicas follow the load: each side on its own "
        "queue (the default), or both together to TTFT and ITL objectives.",
    )
    endpoint: Endpoint = Field(Endpoint(), description="The OpenAI-compatible endpoint.")
    ingress: Ingress = Field(
        Ingress(),
        description="The OpenAI ingress's replicas (app_config/ingress.py); by default they "
        "follow decode's: at least 1, at most decode's max_replicas, decode's "
        "target_ongoing_requests per replica (one ingress replica relays about one engine's "
        "saturation rate: docs/operating.md, 'How each side scales').",
    )
    stream_batching_interval_ms: float | None = Field(
        None,
        ge=0,
        le=STREAM_BATCHING_INTERVAL_MAX_MS,
        description="How long decode's Ray Serve LLM server collects streamed tokens before "
        "sending them on to the ingress as one Serve message (LLMConfig.experimental_configs "
        f"stream_batching_interval_ms; {RAY}'s default: {RAY_STREAM_BATCHING_INTERVAL_MS:g} ms). "
        "Above 0 the first token waits up to one interval (the batcher yields its first "
        "batch after a whole interval) and tokens reach the client in bundles; 0 passes each "
        "token straight through, one streaming message per token through the ingress, which "
        "costs the ingress and decode CPU per token at high concurrency. Only decode streams: "
        "prefill's request is one non-streamed token. Unset: Ray's default "
        "(docs/operating.md, 'Stream batching').",
    )
    gcs_fault_tolerance: GcsFaultTolerance = Field(
        GcsFaultTolerance(), description="Ray GCS fault tolerance with an external store."
    )
    old_cluster_deletion_delay_seconds: int = Field(
        180,
        ge=0,
        le=86400,
        description="After a NewCluster upgrade's new Ray cluster is ready, how long the old one "
        "keeps serving beside it: long enough for the load balancer to register the new "
        "workers and pass their health checks. Both versions answer meanwhile.",
    )
    drain_timeout_seconds: int = Field(
        300,
        ge=30,
        le=3000,
        description="How long a request in flight may take to finish when its replica, pod or "
        "node goes away (scale-down, node drain or repair, the old cluster of an upgrade): "
        "Serve's graceful shutdown, the workers' preStop wait, their termination grace period "
        "and the load balancer's deregistration delay all follow it. At most 840 in effect: "
        "the grace period (this plus 60 s) must fit the 15 minutes an EKS node group update "
        "waits for a node's pods.",
    )

    @field_validator("namespace")
    @classmethod
    def _own_namespace(cls, value: str) -> str:
        if value in RESERVED_NAMESPACES or value.startswith("kube-"):
            raise ValueError(
                f"{value!r} belongs to Kubernetes, EKS or a chart this stack installs; the "
                "serving namespace gets a deny-all network policy and Pod Security labels and "
                "is deleted by `cdk destroy`: use a namespace of its own such as llm-serving"
            )
        return value

    @field_validator("name")
    @classmethod
    def _name_length(cls, value: str) -> str:
        if len(value) > RAYSERVICE_NAME_MAX:
            raise ValueError(
                f"{len(value)} characters; at most {RAYSERVICE_NAME_MAX}: KubeRay cuts longer "
                "prefixes of its pod names, dropping the worker group's name that the dashboard "
                "and the disruption budgets' reviewers read"
            )
        return value

    @field_validator("name")
    @classmethod
    def _no_role_name(cls, value: str) -> str:
        # The dashboard finds each side's pods by the group name in KubeRay's pod names
        # (<name>-<id>-<group>-worker-<id>), and CloudWatch search matches parts of words.
        clashes = [role for role in GPU_ROLES if role in value]
        if clashes:
            raise ValueError(
                f"contains {clashes[0]!r}; KubeRay pod names carry the worker group ('prefill' "
                "or 'decode'), and the dashboard tells the sides apart by it"
            )
        return value

    @field_validator("decode")
    @classmethod
    def _decode_receives_requests(cls, decode: Engine) -> Engine:
        if decode.min_replicas < 1:
            raise ValueError(
                f"decode.min_replicas 0: decode is where requests enter ({RAY}'s P/D ingress "
                "calls decode, which calls prefill), and with decode at zero the ingress scales "
                "to zero too (OpenAiIngress.get_deployment_options); Ray then removes the idle "
                "workers and no Serve proxy is left behind the endpoint to receive the request "
                "that would wake them. Use decode.min_replicas >= 1; prefill may be 0"
            )
        return decode

    @field_validator("old_cluster_deletion_delay_seconds")
    @classmethod
    def _overlap(cls, value: int) -> int:
        needed = seconds_until_new_targets_healthy()
        if value < needed:
            raise ValueError(
                f"{value} s is shorter than the {needed} s the load balancer needs to register "
                "the new cluster's workers and pass their health checks "
                "(app_config/endpoint_health.py); deleting the old cluster earlier leaves the "
                f"endpoint without a healthy target. Use at least {needed}"
            )
        return value

    def engine(self, role: str) -> Engine:
        return getattr(self, role)

    def engine_options_for(self, role: str) -> dict[str, Any]:
        """Both sides' options with this side's over them, text coerced as vLLM types it."""
        merged = {**self.engine_options, **self.engine(role).engine_options}
        return engine_options.coerced(merged)

    def engine_option_path(self, role: str, key: str) -> str:
        """The setting a side's engine option comes from: the side's own, else both sides'."""
        return engine_options.option_path(role, key, own=key in self.engine(role).engine_options)
