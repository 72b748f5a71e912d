"""Every metric the dashboard and the alarms read, with the component that emits it and where
that is written down. Nothing outside this module spells a metric name; tests check the
synthesized dashboard and alert rules against this list, and the Ray names against the installed
Ray package itself.

Prometheus names are as scraped from a Ray pod's metrics port. vLLM runs inside Ray Serve LLM
with ``RayPrometheusStatLogger``: vLLM's ``vllm:x`` metrics go through ``ray.util.metrics``, which
replaces every character outside ``[a-zA-Z0-9_]`` with ``_`` (vllm/v1/metrics/ray_wrappers.py), and
Ray's exporter prefixes ``ray_`` (ray/_private/telemetry/open_telemetry_metric_recorder.py). So
``vllm:time_to_first_token_seconds`` is scraped as ``ray_vllm_time_to_first_token_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

VLLM_METRICS_SOURCE = "vllm-project/vllm v0.26.0, vllm/v1/metrics/loggers.py (PrometheusStatLogger)"
NIXL_METRICS_SOURCE = (
    "vllm-project/vllm v0.26.0, vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py "
    "(NixlPromMetrics)"
)
RAY_LLM_PANELS = "dashboard/modules/metrics/dashboards/serve_llm_dashboard_panels.py"
RAY_SERVE_SOURCE = "ray-project/ray 2.58.0, python/ray/serve/_private/replica.py"
CONTAINER_INSIGHTS_SOURCE = (
    "CloudWatch user guide, 'Amazon EKS and Kubernetes Container Insights with enhanced "
    "observability metrics'; amazon-cloudwatch-agent translator/translate/otel/exporter/awsemf/"
    "kubernetes.go"
)


@dataclass(frozen=True)
class PrometheusMetric:
    """A metric family on the Ray pods' metrics port."""

    name: str
    kind: Literal["histogram", "counter", "gauge"]
    meaning: str
    source: str
    # A file of the installed Ray package that uses the same series name (Ray's own Grafana
    # panels or the code that defines it): tests check the name there.
    in_ray_package: str | None = None

    def selector(self, *, series: str = "", **labels: str) -> str:
        """A PromQL selector. ``series`` picks a histogram's ``_bucket``/``_sum``/``_count``.

        Counters are read by their ``_total`` name alone. Ray exposes it in both of its export
        modes, and in the OpenCensus mode it exposes the bare name beside it with the same
        labels, so a ``__name__=~"x(_total)?"`` matcher makes ``increase()`` fail with "vector
        cannot contain metrics with the same labelset"
        (tests/behaviour/test_alert_rules_behaviour.py evaluates that with promtool)."""
        matchers = ",".join(f'{key}="{value}"' for key, value in labels.items())
        if series and self.kind != "histogram":
            raise ValueError(f"{self.name} is a {self.kind}; only histograms have {series}")
        name = self.stored_name if self.kind == "counter" else f"{self.name}{series}"
        return f"{name}{{{matchers}}}" if matchers else name

    @property
    def stored_name(self) -> str:
        """The counter's name in every export mode (and the only one the scraper keeps)."""
        if self.kind != "counter":
            raise ValueError(f"{self.name} is a {self.kind}, not a counter")
        return f"{self.name}_total"

    def exposed_names(self) -> tuple[str, ...]:
        """Every series name the family appears under on the metrics port."""
        if self.kind == "histogram":
            return tuple(f"{self.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        if self.kind == "counter":
            return (self.name, self.stored_name)
        return (self.name,)

    def queried_names(self) -> tuple[str, ...]:
        """The series names queries read: a counter's ``_total`` only."""
        return (self.stored_name,) if self.kind == "counter" else self.exposed_names()


TTFT = PrometheusMetric(
    "ray_vllm_time_to_first_token_seconds",
    "histogram",
    "Engine time to first token. Prefill: the prompt's forward pass. Decode: the KV pull over "
    "NIXL plus the first decode step.",
    VLLM_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
INTER_TOKEN_LATENCY = PrometheusMetric(
    "ray_vllm_inter_token_latency_seconds",
    "histogram",
    "Time between consecutive output tokens of a request.",
    VLLM_METRICS_SOURCE,
)
REQUESTS_RUNNING = PrometheusMetric(
    "ray_vllm_num_requests_running",
    "gauge",
    "Requests in the engine's running batch.",
    VLLM_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
REQUESTS_WAITING = PrometheusMetric(
    "ray_vllm_num_requests_waiting",
    "gauge",
    "Requests queued for the engine.",
    VLLM_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
KV_CACHE_USAGE = PrometheusMetric(
    "ray_vllm_kv_cache_usage_perc",
    "gauge",
    "Share of the engine's KV cache blocks in use (0 to 1).",
    VLLM_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
NIXL_TRANSFER_TIME = PrometheusMetric(
    "ray_vllm_nixl_xfer_time_seconds",
    "histogram",
    "Duration of one NIXL KV transfer (recorded where the transfer is initiated: decode).",
    NIXL_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
NIXL_FAILED_TRANSFERS = PrometheusMetric(
    "ray_vllm_nixl_num_failed_transfers",
    "counter",
    "NIXL KV transfers that failed.",
    NIXL_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
# Counted by the engine's scheduler per new request (vllm/v1/core/kv_cache_manager.py
# get_computed_blocks: queries += the request's tokens, hits += the tokens of the longest run of
# whole cached blocks, at most all but the last token). Both sides consult their own cache: on
# decode the hit is the prompt prefix it does not pull over NIXL (nixl/pull_scheduler.py
# get_num_new_matched_tokens subtracts it; base_worker.py _apply_prefix_caching reads only the
# rest). Ray exports a counter from its first non-zero increment (ray_wrappers.py inc).
PREFIX_CACHE_QUERIES = PrometheusMetric(
    "ray_vllm_prefix_cache_queries",
    "counter",
    "Prompt tokens looked up in the engine's own (GPU) prefix cache.",
    VLLM_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
PREFIX_CACHE_HITS = PrometheusMetric(
    "ray_vllm_prefix_cache_hits",
    "counter",
    "Prompt tokens found in the engine's own (GPU) prefix cache, not computed (prefill) or not "
    "pulled over NIXL (decode).",
    VLLM_METRICS_SOURCE,
    RAY_LLM_PANELS,
)
SERVE_PROCESSING_LATENCY = PrometheusMetric(
    "ray_serve_deployment_processing_latency_ms",
    "histogram",
    "Ray Serve replica processing latency, per deployment.",
    RAY_SERVE_SOURCE,
    "serve/_private/replica.py",
)

RAY_SERVE_CONTROLLER_SOURCE = (
    "ray-project/ray 2.58.0, python/ray/serve/_private/deployment_state.py (exported by the "
    "Serve controller, on the head)"
)
SERVE_TARGET_REPLICAS = PrometheusMetric(
    "ray_serve_autoscaling_target_replicas",
    "gauge",
    "Replicas Serve's autoscaler is trying to reach, per deployment.",
    RAY_SERVE_CONTROLLER_SOURCE,
    "serve/_private/deployment_state.py",
)
SERVE_HEALTHY_REPLICAS = PrometheusMetric(
    "ray_serve_deployment_replica_healthy",
    "gauge",
    "1 per healthy replica and 0 per unhealthy one, per deployment and replica.",
    RAY_SERVE_CONTROLLER_SOURCE,
    "serve/_private/deployment_state.py",
)
# Started by each Serve replica actor itself (on its worker pod), once, in its constructor before
# the user class (the engine) loads, labelled with the Serve context: deployment, replica,
# application (ray/serve/metrics.py _add_serve_metric_tags). A restarted replica is a new actor
# with a new replica id, so each start is a new series born at 1; the node's metrics agent keeps
# counters for as long as it runs (ray/_private/telemetry/open_telemetry_metric_recorder.py).
SERVE_REPLICA_STARTS = PrometheusMetric(
    "ray_serve_deployment_replica_starts",
    "counter",
    "Serve replica actors started, one series per replica (a gang restart starts a new "
    "replica for every rank of the group).",
    "ray-project/ray 2.58.0, python/ray/serve/_private/replica.py (ReplicaMetricsManager)",
    "serve/_private/replica.py",
)
# Counted by the Serve controller per replica (with its high-cardinality tags, on by default:
# RAY_SERVE_CONTROLLER_METRICS_INCLUDE_HIGH_CARDINALITY_TAGS) for every failed health check, a
# crashed actor included; a gang's siblings stopped with it have none (tests/data/gang_restart):
# it names the rank that failed. Ray's own name ends in _total already; the exporter adds none.
SERVE_HEALTH_CHECK_FAILURES = PrometheusMetric(
    "ray_serve_health_check_failures",
    "counter",
    "Failed health checks, per replica: the rank whose failure restarted its group.",
    RAY_SERVE_CONTROLLER_SOURCE,
    "serve/_private/deployment_state.py",
)
# Ray's autoscaler exports these itself, without Ray's prefix, from the head's autoscaler
# sidecar on its own port (ray/autoscaler/_private/prom_metrics.py, namespace "autoscaler";
# v2/metrics_reporter.py labels them NodeType = the KubeRay worker group).
AUTOSCALER_PENDING_NODES = PrometheusMetric(
    "autoscaler_pending_nodes",
    "gauge",
    "Worker pods Ray's autoscaler has asked for that have not started Ray yet, per group.",
    "ray-project/ray 2.58.0, python/ray/autoscaler/v2/metrics_reporter.py",
)
AUTOSCALER_ACTIVE_NODES = PrometheusMetric(
    "autoscaler_active_nodes",
    "gauge",
    "Worker pods running Ray, per group, as Ray's autoscaler counts them.",
    "ray-project/ray 2.58.0, python/ray/autoscaler/v2/metrics_reporter.py",
)
# Ray Serve LLM names each side's deployment with a prefix (ray/llm/_internal/serve/
# serving_patterns/prefill_decode/builder.py, name_prefix): the side of a Serve metric.
DEPLOYMENT_PREFIX = {"prefill": "Prefill:", "decode": "Decode:"}

# What the managed scraper keeps (everything else on the port is dropped at ingestion).
SCRAPED: tuple[PrometheusMetric, ...] = (
    TTFT,
    INTER_TOKEN_LATENCY,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    KV_CACHE_USAGE,
    PREFIX_CACHE_QUERIES,
    PREFIX_CACHE_HITS,
    NIXL_TRANSFER_TIME,
    NIXL_FAILED_TRANSFERS,
    SERVE_PROCESSING_LATENCY,
    SERVE_TARGET_REPLICAS,
    SERVE_HEALTHY_REPLICAS,
    AUTOSCALER_PENDING_NODES,
    AUTOSCALER_ACTIVE_NODES,
)

# Counted by the app's own request router (serve_extensions/prefix_router.py) in the process
# that routes to the side: the decode replicas for prefill, the ingress for decode. So the pod's
# role label is the caller's; `deployment` (Prefill:<model>, Decode:<model>) is the side routed
# to. Kept when a side routes with it (serving.<side>.request_router = prefix_affinity).
PREFIX_ROUTER_SOURCE = "this project, serve_extensions/prefix_router.py (PrefixAffinityRouter)"
ROUTER_PROMPT_BLOCKS = PrometheusMetric(
    "ray_pd_llm_router_prompt_blocks",
    "counter",
    "Prompt blocks (256 characters) the prefix-aware router routed, per side routed to.",
    PREFIX_ROUTER_SOURCE,
)
ROUTER_MATCHED_BLOCKS = PrometheusMetric(
    "ray_pd_llm_router_matched_blocks",
    "counter",
    "Leading prompt blocks the chosen replica had been sent before: the router's prediction of "
    "the engine's prefix-cache hits, per side routed to.",
    PREFIX_ROUTER_SOURCE,
)
SCRAPED_FOR_PREFIX_ROUTING: tuple[PrometheusMetric, ...] = (
    ROUTER_PROMPT_BLOCKS,
    ROUTER_MATCHED_BLOCKS,
)

# The KV offload tier on prefill (serving.prefill.kv_offload_gib_per_gpu): vLLM's
# OffloadingConnector inside a MultiConnector with NIXL. The external prefix cache is what the
# side's KV connector supplies (vllm/v1/core/sched/scheduler.py: queries = the tokens the GPU
# cache did not hold, hits = the connector's matched tokens); on prefill NIXL matches nothing
# (pull_scheduler.py: only decode pulls), so its hits are tokens read back from CPU memory.
# The transfer counters are the connector's own (offloading/metrics.py, _TransferMetricName;
# Ray exports them through the stat logger's KV-connector metrics, as it does NIXL's). The
# CPU pool's kv_offload_cpu_cache_usage_perc is not its occupancy (the share pinned by
# transfers in flight, kv_offload/cpu/spec.py): not shown. Kept when prefill offloads.
KV_OFFLOAD_SOURCE = (
    "vllm-project/vllm v0.26.0, vllm/distributed/kv_transfer/kv_connector/v1/offloading/"
    "metrics.py (OffloadPromMetrics) and vllm/v1/metrics/loggers.py (external prefix cache)"
)
EXTERNAL_PREFIX_CACHE_QUERIES = PrometheusMetric(
    "ray_vllm_external_prefix_cache_queries",
    "counter",
    "Prompt tokens the GPU prefix cache did not hold, looked up through the KV connector.",
    KV_OFFLOAD_SOURCE,
    RAY_LLM_PANELS,
)
EXTERNAL_PREFIX_CACHE_HITS = PrometheusMetric(
    "ray_vllm_external_prefix_cache_hits",
    "counter",
    "Prompt tokens the KV connector supplied: on prefill, read back from the CPU offload tier.",
    KV_OFFLOAD_SOURCE,
    RAY_LLM_PANELS,
)
KV_OFFLOAD_STORE_BYTES = PrometheusMetric(
    "ray_vllm_kv_offload_store_bytes",
    "counter",
    "Bytes of KV blocks stored from GPU to the CPU offload tier.",
    KV_OFFLOAD_SOURCE,
    RAY_LLM_PANELS,
)
KV_OFFLOAD_LOAD_BYTES = PrometheusMetric(
    "ray_vllm_kv_offload_load_bytes",
    "counter",
    "Bytes of KV blocks loaded back from the CPU offload tier to GPU.",
    KV_OFFLOAD_SOURCE,
    RAY_LLM_PANELS,
)
SCRAPED_FOR_KV_OFFLOAD: tuple[PrometheusMetric, ...] = (
    EXTERNAL_PREFIX_CACHE_QUERIES,
    EXTERNAL_PREFIX_CACHE_HITS,
    KV_OFFLOAD_STORE_BYTES,
    KV_OFFLOAD_LOAD_BYTES,
)

# Set by the app's latency policy (serve_extensions/latency_autoscaler.py) in the Serve
# controller's process, on the head; `deployment` (Prefill:<model>, Decode:<model>) names the
# side. Kept when serving.scaling.policy = latency.
LATENCY_POLICY_SOURCE = (
    "this project, serve_extensions/latency_autoscaler.py (LatencyObjectivePolicy)"
)
SCALING_WANTED_REPLICAS = PrometheusMetric(
    "ray_pd_llm_scaling_wanted_replicas",
    "gauge",
    "Serve replicas the latency policy wants for the side at its last decision, before Serve's "
    "upscale and downscale delays.",
    LATENCY_POLICY_SOURCE,
)
SCALING_REASON = PrometheusMetric(
    "ray_pd_llm_scaling_reason",
    "gauge",
    "1 for the reason of the latency policy's last decision for the side (over_objective, "
    "under_objective, within_objective, replicas_starting, queue_fallback, awaiting_samples, "
    "at_max_replicas, at_gpu_budget, load_rising, missed_there_recently), 0 for the others.",
    LATENCY_POLICY_SOURCE,
)
SCRAPED_FOR_LATENCY_POLICY: tuple[PrometheusMetric, ...] = (
    SCALING_WANTED_REPLICAS,
    SCALING_REASON,
)

# Kept only when a side runs data parallel groups (its DPGroupRestarting rule and dashboard rows
# read them): a dense deployment does not pay for series per replica it never reads.
SCRAPED_FOR_DATA_PARALLEL: tuple[PrometheusMetric, ...] = (
    SERVE_REPLICA_STARTS,
    SERVE_HEALTH_CHECK_FAILURES,
)

# Labels that tell one data parallel rank from another on vLLM's series: Ray's stat logger adds
# the Serve replica id (vllm/v1/metrics/ray_wrappers.py, _get_replica_id); vLLM's own ``engine``
# label is the engine index, which for a DP rank started with data_parallel_rank r (external
# load balancing, one engine per client) is r (vllm/engine/arg_utils.py create_engine_config,
# vllm/v1/engine/core_client.py engine_ranks_managed, vllm/v1/metrics/loggers.py labelnames;
# vLLM 0.26.0). Ray's DPServer sets data_parallel_rank to the replica's gang rank
# (ray/llm/_internal/serve/serving_patterns/data_parallel/dp_server.py, Ray 2.58.0).
RANK_LABELS = ("ReplicaId", "engine")

# Written by the scraper itself for every target it tries, whatever metric_relabel_configs keep:
# 1 when the scrape succeeded, 0 when it failed (Prometheus docs, "Jobs and instances",
# "Automatically generated labels and time series"). A side without any up == 1 series is a
# side nobody is watching.
SCRAPE_UP = PrometheusMetric(
    "up",
    "gauge",
    "1 for each target the scraper read successfully, 0 for one it could not read.",
    "Prometheus documentation, 'Jobs and instances' (automatically generated time series)",
)
GENERATED_BY_SCRAPER: tuple[PrometheusMetric, ...] = (SCRAPE_UP,)

# The label the scraper's relabeling sets from the pod's llm-serving/role label.
ROLE_LABEL = "role"


@dataclass(frozen=True)
class CloudWatchMetric:
    """A metric in CloudWatch with the dimension sets its emitter publishes it under."""

    namespace: str
    name: str
    dimension_sets: tuple[tuple[str, ...], ...]
    meaning: str
    source: str

    def require_dimensions(self, dimensions: tuple[str, ...]) -> None:
        if dimensions not in self.dimension_sets:
            raise ValueError(f"{self.name} is not published with dimensions {dimensions}")


_POD = (("ClusterName",), ("ClusterName", "Namespace"), ("ClusterName", "Namespace", "PodName"))
_NODE = (("ClusterName",), ("ClusterName", "NodeName", "InstanceId"))


def _container_insights(name: str, dimension_sets: tuple, meaning: str) -> CloudWatchMetric:
    return CloudWatchMetric(
        "ContainerInsights", name, dimension_sets, meaning, CONTAINER_INSIGHTS_SOURCE
    )


POD_GPU_UTILIZATION = _container_insights(
    "pod_gpu_utilization", _POD, "GPU utilisation of the pod's GPUs (DCGM), percent."
)
POD_GPU_MEMORY_UTILIZATION = _container_insights(
    "pod_gpu_memory_utilization", _POD, "GPU memory in use on the pod's GPUs, percent."
)
POD_GPU_REQUEST = _container_insights(
    "pod_gpu_request", _POD, "GPUs the pod requests (nvidia.com/gpu)."
)
POD_EFA_RX_BYTES = _container_insights(
    "pod_efa_rx_bytes", _POD, "Bytes received over the pod's EFA devices, per second."
)
POD_EFA_TX_BYTES = _container_insights(
    "pod_efa_tx_bytes", _POD, "Bytes sent over the pod's EFA devices, per second."
)
NODE_EFA_UNRESPONSIVE_REMOTE = _container_insights(
    "node_efa_unresponsive_remote_events",
    _NODE,
    "EFA connections whose remote peer stopped responding.",
)
NODE_EFA_IMPAIRED_REMOTE = _container_insights(
    "node_efa_impaired_remote_conn_events",
    _NODE,
    "EFA connections to a remote peer that became impaired.",
)
CLUSTER_FAILED_NODES = _container_insights(
    "cluster_failed_node_count", (("ClusterName",),), "Nodes that are not Ready."
)
AUTO_SCALING_SOURCE = "EC2 Auto Scaling user guide, 'Amazon CloudWatch metrics for Auto Scaling'"
GROUP_DESIRED = CloudWatchMetric(
    "AWS/AutoScaling",
    "GroupDesiredCapacity",
    (("AutoScalingGroupName",),),
    "Nodes the node group wants.",
    AUTO_SCALING_SOURCE,
)
GROUP_IN_SERVICE = CloudWatchMetric(
    "AWS/AutoScaling",
    "GroupInServiceInstances",
    (("AutoScalingGroupName",),),
    "Nodes of the node group in service.",
    AUTO_SCALING_SOURCE,
)
# Sent only when not zero: an alarm on it treats missing data as "no failure".
RULE_FAILED_INVOCATIONS = CloudWatchMetric(
    "AWS/Events",
    "FailedInvocations",
    (("RuleName",),),
    "Events a rule could not deliver to its target, after retries.",
    "EventBridge user guide, 'Monitoring Amazon EventBridge'",
)

CLOUDWATCH_METRICS: tuple[CloudWatchMetric, ...] = (
    POD_GPU_UTILIZATION,
    POD_GPU_MEMORY_UTILIZATION,
    POD_GPU_REQUEST,
    POD_EFA_RX_BYTES,
    POD_EFA_TX_BYTES,
    NODE_EFA_UNRESPONSIVE_REMOTE,
    NODE_EFA_IMPAIRED_REMOTE,
    CLUSTER_FAILED_NODES,
    GROUP_DESIRED,
    GROUP_IN_SERVICE,
    RULE_FAILED_INVOCATIONS,
)
