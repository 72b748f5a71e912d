"""The CloudWatch dashboard: prefill on the left, decode on the right, one row per signal.

Ray and vLLM panels are PromQL on the Prometheus workspace through the CloudWatch data source
(histogram quantiles need PromQL). GPU and EFA panels are Container Insights, whose pod metrics
name a KubeRay pod by its full name, <rayservice>-<id>-<group>-worker-<id>: a search on the
group's word picks each side's pods (app_config.serving refuses RayService names containing it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from app_config import Settings
from app_config.derived_names import dashboard_name
from app_config.node_labels import GPU_ROLES
from catalog.metrics import (
    AUTOSCALER_ACTIVE_NODES,
    AUTOSCALER_PENDING_NODES,
    EXTERNAL_PREFIX_CACHE_HITS,
    EXTERNAL_PREFIX_CACHE_QUERIES,
    INTER_TOKEN_LATENCY,
    KV_CACHE_USAGE,
    KV_OFFLOAD_LOAD_BYTES,
    KV_OFFLOAD_STORE_BYTES,
    NIXL_FAILED_TRANSFERS,
    NIXL_TRANSFER_TIME,
    POD_EFA_RX_BYTES,
    POD_EFA_TX_BYTES,
    POD_GPU_MEMORY_UTILIZATION,
    POD_GPU_REQUEST,
    POD_GPU_UTILIZATION,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_MATCHED_BLOCKS,
    ROUTER_PROMPT_BLOCKS,
    SCALING_REASON,
    SCALING_WANTED_REPLICAS,
    SERVE_HEALTH_CHECK_FAILURES,
    SERVE_HEALTHY_REPLICAS,
    SERVE_PROCESSING_LATENCY,
    SERVE_REPLICA_STARTS,
    SERVE_TARGET_REPLICAS,
    TTFT,
    CloudWatchMetric,
    PrometheusMetric,
)
from constructs import Construct
from monitoring import promql
from monitoring.data_parallel import data_parallel_sides
from monitoring.scrape_config import kv_offload_sides, prefix_routed_sides

PERIOD = Duration.minutes(1)
HALF = 12  # the dashboard grid is 24 units wide
HEIGHT = 6


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str  # the left axis label
    lines: dict[str, Callable[[str], str]]  # legend -> the PromQL for a side
    right_unit: str = ""
    right_lines: dict[str, Callable[[str], str]] | None = None  # on the right axis


class ServingDashboard(Construct):
    """Publishes ``dashboard``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        data_source_function_name: str,
        alarms: list[cloudwatch.IAlarm],
    ) -> None:
        super().__init__(scope, construct_id)
        self._function = data_source_function_name
        self._settings = settings
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name(settings.prefix),
            default_interval=Duration.hours(3),
        )
        self.dashboard.add_widgets(
            cloudwatch.TextWidget(
                markdown=f"# {settings.serving.name}: prefill (left) and decode (right)\n"
                "Alarm runbooks: docs/observability.md, *Operating*. Ray and vLLM panels query "
                "the managed "
                "Prometheus workspace; GPU and EFA panels are Container Insights.",
                width=2 * HALF,
                height=2,
            )
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(alarms=alarms, title="Alarms", width=2 * HALF, height=3)
        )
        for row in self._rows():
            self.dashboard.add_widgets(*row)
        self.dashboard.add_widgets(
            *(self._nodes_graph(group) for group in self._settings.gpu_nodes.groups())
        )

    def _rows(self) -> list[list[cloudwatch.IWidget]]:
        return (
            self._promql_rows()
            + self._prefix_cache_rows()
            + self._kv_offload_rows()
            + self._prefix_routing_rows()
            + self._latency_policy_rows()
            + self._data_parallel_rows()
            + self._pod_rows()
        )

    def _prefix_cache_rows(self) -> list[list[cloudwatch.IWidget]]:
        """vLLM's own prefix-cache hit rate per side: of the prompt tokens its engines looked
        up, the share they found cached. Prefill skips computing them; decode skips pulling
        them over NIXL (it consults its own cache first, vLLM 0.26 nixl/pull_scheduler.py).
        With a CPU offload tier, prefill's second line adds the tokens read back from it."""
        title = "Prefix cache hit rate, vLLM's count (0-1)"
        own = partial(promql.side_ratio, (PREFIX_CACHE_HITS,), PREFIX_CACHE_QUERIES)
        offloading = kv_offload_sides(self._settings)
        lines = {
            "prefill": {"GPU prefix cache (not computed)": own},
            "decode": {"own prefix cache (not pulled over NIXL)": own},
        }
        for role in offloading:
            lines[role]["GPU or CPU offload tier"] = partial(
                promql.side_ratio,
                (PREFIX_CACHE_HITS, EXTERNAL_PREFIX_CACHE_HITS),
                PREFIX_CACHE_QUERIES,
            )
        return [
            [self._promql_graph(role, Panel(title, "share", lines[role])) for role in GPU_ROLES]
        ]

    def _kv_offload_rows(self) -> list[list[cloudwatch.IWidget]]:
        """The CPU offload tier's use, for the side that has one: KV bytes stored to it and
        read back from it, and the share of the GPU cache's misses it served."""
        sides = kv_offload_sides(self._settings)
        if not sides:
            return []
        panel = Panel(
            "KV offload tier: bytes/s stored and read back",
            "bytes/s",
            {
                "stored GPU -> CPU": partial(promql.side_rate, KV_OFFLOAD_STORE_BYTES),
                "read back CPU -> GPU": partial(promql.side_rate, KV_OFFLOAD_LOAD_BYTES),
            },
            right_unit="share of GPU misses",
            right_lines={
                "served from CPU": partial(
                    promql.side_ratio, (EXTERNAL_PREFIX_CACHE_HITS,), EXTERNAL_PREFIX_CACHE_QUERIES
                )
            },
        )
        return [
            self._side_row(
                panel,
                sides,
                lambda role: (
                    f"**{role}**: no KV offload tier (`serving.{role}.kv_offload_gib_per_gpu` 0)."
                ),
            )
        ]

    def _prefix_routing_rows(self) -> list[list[cloudwatch.IWidget]]:
        """The app's prefix-aware router's hit rate per side that uses it: of the prompt blocks
        it routed, the share the chosen replica had been sent before (a prediction of vLLM's
        prefix-cache hits, made where the side is routed from)."""
        sides = prefix_routed_sides(self._settings)
        if not sides:
            return []
        panel = Panel(
            "Prefix-aware routing: predicted prefix-cache hit rate (0-1)",
            "share",
            {
                "blocks already on the chosen replica": partial(
                    promql.share_of, ROUTER_MATCHED_BLOCKS, ROUTER_PROMPT_BLOCKS
                )
            },
        )
        return [
            self._side_row(
                panel,
                sides,
                lambda role: (
                    f"**{role}**: routed by `power_of_two` "
                    f"(`serving.{role}.request_router`): no prefix affinity to show."
                ),
            )
        ]

    def _side_row(
        self, panel: Panel, sides: Collection[str], absent: Callable[[str], str]
    ) -> list[cloudwatch.IWidget]:
        """One panel per side that has what it shows, and a line saying why for the other."""
        return [
            self._promql_graph(role, panel)
            if role in sides
            else cloudwatch.TextWidget(markdown=absent(role), width=HALF, height=HEIGHT)
            for role in GPU_ROLES
        ]

    def _latency_policy_rows(self) -> list[list[cloudwatch.IWidget]]:
        """Under serving.scaling.policy = latency: what the policy wants for each side against
        what Serve targets (Serve's delays stand between them) and the reason of its last
        decision (1 for the reason that holds, one series per reason)."""
        if self._settings.serving.scaling.policy != "latency":
            return []
        panel = Panel(
            "Latency policy: replicas wanted, and why",
            "replicas",
            {
                "policy wants": partial(promql.latest_decision, SCALING_WANTED_REPLICAS),
                "Serve targets": partial(promql.target_replicas, SERVE_TARGET_REPLICAS),
            },
            right_unit="reason (1 = current)",
            right_lines={
                # One series per reason; ${LABEL} is the data source's "reason=..."
                "${LABEL}": partial(promql.latest_decision, SCALING_REASON, by=("reason",))
            },
        )
        return [[self._promql_graph(role, panel) for role in GPU_ROLES]]

    def _promql_rows(self) -> list[list[cloudwatch.IWidget]]:
        return [
            [self._promql_graph(role, panel) for role in GPU_ROLES]
            for panel in (
                self._latency_panel("Time to first token", TTFT),
                self._latency_panel("Inter-token latency", INTER_TOKEN_LATENCY),
                Panel(
                    "Requests",
                    "requests",
                    {
                        "running": partial(promql.total, REQUESTS_RUNNING),
                        "waiting": partial(promql.total, REQUESTS_WAITING),
                    },
                ),
                Panel(
                    "Scaling: Serve replicas and Ray worker pods",
                    "count",
                    {
                        "replicas wanted": partial(promql.target_replicas, SERVE_TARGET_REPLICAS),
                        "replicas healthy": partial(
                            promql.healthy_replicas, SERVE_HEALTHY_REPLICAS
                        ),
                        "worker pods pending": partial(
                            promql.worker_pods, AUTOSCALER_PENDING_NODES
                        ),
                        "worker pods running": partial(promql.worker_pods, AUTOSCALER_ACTIVE_NODES),
                    },
                ),
                Panel(
                    "KV cache usage (0-1)",
                    "share",
                    {"busiest engine": partial(promql.peak, KV_CACHE_USAGE)},
                ),
                self._latency_panel("NIXL KV transfer time", NIXL_TRANSFER_TIME),
                Panel(
                    "NIXL failed transfers (per 5 min)",
                    "transfers",
                    {"failed": partial(promql.increase, NIXL_FAILED_TRANSFERS)},
                ),
                Panel(
                    "Ray Serve replica processing latency p95, by deployment (ms)",
                    "ms",
                    {
                        # One series per deployment; ${LABEL} is the data source's
                        # "deployment=..." (CloudWatch dynamic labels).
                        "p95 ${LABEL}": partial(
                            promql.quantile, SERVE_PROCESSING_LATENCY, 0.95, by=("deployment",)
                        )
                    },
                ),
            )
        ]

    def _pod_rows(self) -> list[list[cloudwatch.IWidget]]:
        return [
            [self._pod_graph(role, title, metrics) for role in GPU_ROLES]
            for title, metrics in (
                (
                    "GPU utilisation and memory (%)",
                    (POD_GPU_UTILIZATION, POD_GPU_MEMORY_UTILIZATION),
                ),
                ("EFA throughput (bytes/s)", (POD_EFA_RX_BYTES, POD_EFA_TX_BYTES)),
            )
        ]

    def _data_parallel_rows(self) -> list[list[cloudwatch.IWidget]]:
        """For sides whose replicas are DP groups: the groups' health and each rank's load. A
        side without DP keeps its half of these rows empty, so decode stays on the right."""
        sides = data_parallel_sides(self._settings)
        if not sides:
            return []
        rows: list[list[cloudwatch.IWidget]] = []
        for index, panel in enumerate(self._data_parallel_panels()):
            row: list[cloudwatch.IWidget] = []
            for role in GPU_ROLES:
                if role in sides:
                    row.append(self._promql_graph(role, panel(sides[role])))
                elif index == 0:
                    row.append(
                        cloudwatch.TextWidget(
                            markdown=f"**{role}**: one engine per replica "
                            "(`data_parallel_size` 1): its load and replicas are in the rows "
                            "above.",
                            width=HALF,
                            height=HEIGHT,
                        )
                    )
                else:
                    row.append(cloudwatch.Spacer(width=HALF, height=HEIGHT))
            rows.append(row)
        return rows

    @staticmethod
    def _data_parallel_panels() -> list[Callable[[int], Panel]]:
        """Each panel for a side with ``ranks`` ranks per group. Serve starts and stops a group
        whole (RESTART_GANG), so healthy ranks / ranks with a fraction is a group with a rank
        down; ranks started in 5 minutes beyond a scale-up are a group restarting (the
        DPGroupRestarting alert)."""

        def groups(ranks: int) -> Panel:
            target, healthy = SERVE_TARGET_REPLICAS, SERVE_HEALTHY_REPLICAS
            return Panel(
                f"DP groups of {ranks} ranks: wanted and healthy",
                "groups",
                {
                    "groups wanted": lambda role: (
                        f"{promql.target_replicas(target, role)} / {ranks}"
                    ),
                    "groups with every rank healthy": lambda role: (
                        f"sum(floor({promql.healthy_replicas(healthy, role, by=promql.CLUSTER)}"
                        f" / {ranks}))"
                    ),
                    f"healthy ranks / {ranks}": lambda role: (
                        f"{promql.healthy_replicas(healthy, role)} / {ranks}"
                    ),
                },
                right_unit="ranks",
                right_lines={
                    "ranks started (5 min)": lambda role: (
                        f"sum({promql.ranks_started(SERVE_REPLICA_STARTS, role, '5m')})"
                    )
                },
            )

        def requests(_ranks: int) -> Panel:
            # One series per rank; ${LABEL} is the data source's "ReplicaId=...,engine=<rank>".
            return Panel(
                "Per DP rank: requests",
                "requests",
                {
                    "running ${LABEL}": partial(promql.per_rank, REQUESTS_RUNNING),
                    "waiting ${LABEL}": partial(promql.per_rank, REQUESTS_WAITING),
                },
            )

        def kv_cache(_ranks: int) -> Panel:
            return Panel(
                "Per DP rank: KV cache usage (0-1)",
                "share",
                {"${LABEL}": partial(promql.per_rank, KV_CACHE_USAGE, aggregation="max")},
            )

        def failed(_ranks: int) -> Panel:
            # One series per rank that failed; ${LABEL} is "node=...,pod=...,replica=...".
            return Panel(
                "Per DP rank: failed health checks (30 min), with its node",
                "health checks",
                {
                    "${LABEL}": partial(
                        promql.failed_ranks,
                        SERVE_HEALTH_CHECK_FAILURES,
                        SERVE_REPLICA_STARTS,
                        window="30m",
                    )
                },
            )

        return [groups, failed, requests, kv_cache]

    @staticmethod
    def _latency_panel(title: str, metric: PrometheusMetric) -> Panel:
        return Panel(
            f"{title} (s)",
            "s",
            {
                "p50": partial(promql.quantile, metric, 0.5),
                "p95": partial(promql.quantile, metric, 0.95),
            },
        )

    def _promql_graph(self, role: str, panel: Panel) -> cloudwatch.GraphWidget:
        right = {}
        if panel.right_lines:
            right = {
                "right": self._promql_lines(role, panel.right_lines),
                "right_y_axis": cloudwatch.YAxisProps(
                    label=panel.right_unit, show_units=False, min=0
                ),
            }
        return cloudwatch.GraphWidget(
            title=f"{role}: {panel.title}",
            left=self._promql_lines(role, panel.lines),
            left_y_axis=cloudwatch.YAxisProps(label=panel.unit, show_units=False, min=0),
            width=HALF,
            height=HEIGHT,
            **right,
        )

    def _promql_lines(
        self, role: str, lines: dict[str, Callable[[str], str]]
    ) -> list[cloudwatch.IMetric]:
        return [
            cloudwatch.MathExpression(
                expression=f"LAMBDA('{self._function}', '{query(role)}')",
                using_metrics={},
                label=legend,
                period=PERIOD,
            )
            for legend, query in lines.items()
        ]

    def _pod_graph(
        self, role: str, title: str, metrics: tuple[CloudWatchMetric, ...]
    ) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title=f"{role}: {title}",
            left=[
                cloudwatch.MathExpression(
                    # A shared node's one pod holds both sides: both graphs show it.
                    expression=self._pod_search(metric, self._settings.side(role).group),
                    using_metrics={},
                    label=f"{metric.name} ${{PROP('Dim.PodName')}}",  # one line per pod
                    period=PERIOD,
                )
                for metric in metrics
            ],
            width=HALF,
            height=HEIGHT,
        )

    def _nodes_graph(self, role: str) -> cloudwatch.GraphWidget:
        """Nodes of a node group (a side's, or the shared one): each runs one worker pod holding
        all of its GPUs. (The node
        group's own counts live with its Auto Scaling group, whose name changes when the group
        is replaced; its shortfall alarm is in the status widget above.)"""
        group = self._settings.gpu_nodes.groups()[role]
        gpus = group.instance.gpus
        return cloudwatch.GraphWidget(
            title=f"{role}: GPU nodes serving (Ray workers)",
            left=[
                cloudwatch.MathExpression(
                    expression=f"SUM({self._pod_search(POD_GPU_REQUEST, role)}) / {gpus}",
                    using_metrics={},
                    label="nodes with a worker",
                    period=PERIOD,
                )
            ],
            # The Cluster Autoscaler moves the count between the node group's bounds.
            left_annotations=[
                cloudwatch.HorizontalAnnotation(value=group.scaling.min_size, label="min_size"),
                cloudwatch.HorizontalAnnotation(value=group.scaling.max_size, label="max_size"),
            ],
            left_y_axis=cloudwatch.YAxisProps(label="nodes", show_units=False, min=0),
            width=HALF,
            height=HEIGHT,
        )

    def _pod_search(self, metric: CloudWatchMetric, role: str) -> str:
        dimensions = ("ClusterName", "Namespace", "PodName")
        metric.require_dimensions(dimensions)
        schema = ",".join((metric.namespace, *dimensions))
        terms = (
            f'MetricName="{metric.name}" ClusterName="{self._settings.cluster_name}" '
            f'Namespace="{self._settings.serving.namespace}" PodName={role}'
        )
        return f"SEARCH('{{{schema}}} {terms}', 'Average', {int(PERIOD.to_seconds())})"
