"""Observability as synthesized: the dashboard and alert rules read only metrics that Ray, vLLM,
Container Insights and Auto Scaling emit (catalog/metrics.py, cross-checked against the installed
Ray package), every PromQL query parses, thresholds come from the configuration, the add-ons'
roles trust one service account each, and the alarm topic is encrypted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import ray
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app_config import Settings
from app_config.node_labels import GPU_ROLES
from catalog.container_insights import log_group_kinds, log_group_name
from catalog.eks_versions import CLOUDWATCH_OBSERVABILITY, NODE_MONITORING_AGENT
from catalog.metrics import (
    CLOUDWATCH_METRICS,
    DEPLOYMENT_PREFIX,
    EXTERNAL_PREFIX_CACHE_HITS,
    EXTERNAL_PREFIX_CACHE_QUERIES,
    GENERATED_BY_SCRAPER,
    KV_CACHE_USAGE,
    KV_OFFLOAD_LOAD_BYTES,
    KV_OFFLOAD_STORE_BYTES,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    RANK_LABELS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROLE_LABEL,
    SCRAPED,
    SCRAPED_FOR_DATA_PARALLEL,
    SCRAPED_FOR_KV_OFFLOAD,
    SCRAPED_FOR_LATENCY_POLICY,
    SERVE_HEALTH_CHECK_FAILURES,
    SERVE_REPLICA_STARTS,
)
from constructs.cluster.alarm_topic import PUBLISHERS
from constructs.cluster.observability_addons import (
    CLOUDWATCH_AGENT_NAMESPACE,
    CLOUDWATCH_AGENT_SERVICE_ACCOUNT,
)
from monitoring import promql
from monitoring.data_parallel import data_parallel_sides
from monitoring.scrape_config import (
    AUTOSCALER_JOB_NAME,
    HEAD_ROLE,
    kept_metrics,
    kv_offload_sides,
)
from serving_manifests.names import AUTOSCALER_METRICS_PORT
from tests.conftest import Synthesized, cfn_text
from tests.promql import selectors

# deepseek-v3-pd: both sides' replicas are DP groups (16 ranks each).
CONFIGURATIONS = ("default", "public-endpoint", "reserved-capacity", "deepseek-v3-pd")
# The DeepSeek example with a dense prefill: one side with DP groups, one without.
DENSE_PREFILL = {
    "serving.prefill.data_parallel_size": "1",
    "serving.prefill.tensor_parallel_size": "8",
    "serving.prefill.expert_parallel": "false",
}
LATENCY_POLICY = {
    "serving.prefill.max_replicas": "2",
    "serving.decode.max_replicas": "2",
    "serving.scaling.policy": "latency",
    "serving.scaling.ttft": json.dumps({"percentile": 95, "value_ms": 800}),
    "serving.scaling.itl": json.dumps({"percentile": 95, "value_ms": 60}),
}
LATENCY_PANEL = "Latency policy: replicas wanted, and why"
CAPTURED = Path(__file__).resolve().parents[1] / "data" / "gpu_check"
LAMBDA_QUERY = re.compile(r"LAMBDA\('[^']*', '([^']*)'\)")
SEARCH = re.compile(r"SEARCH\('\{([^}]*)\} ([^']*)'")


@pytest.fixture(scope="module", params=CONFIGURATIONS)
def synthesized(request: pytest.FixtureRequest, synthesize) -> Synthesized:
    return synthesize(request.param)


def _dashboard(synthesized: Synthesized) -> dict[str, Any]:
    (dashboard,) = synthesized.resources("observability", "AWS::CloudWatch::Dashboard").values()
    return json.loads(cfn_text(dashboard["Properties"]["DashboardBody"]))


def _dashboard_expressions(synthesized: Synthesized) -> list[str]:
    return [
        line["expression"]
        for widget in _dashboard(synthesized)["widgets"]
        for line in widget["properties"].get("metrics", [])
        for line in line
        if isinstance(line, dict) and "expression" in line
    ]


def _alert_rules(synthesized: Synthesized) -> list[dict[str, Any]]:
    (namespace,) = synthesized.resources("observability", "AWS::APS::RuleGroupsNamespace").values()
    (group,) = yaml.safe_load(namespace["Properties"]["Data"])["groups"]
    return group["rules"]


def _queries(synthesized: Synthesized) -> list[str]:
    dashboard = [
        match for e in _dashboard_expressions(synthesized) for match in LAMBDA_QUERY.findall(e)
    ]
    return dashboard + [rule["expr"] for rule in _alert_rules(synthesized)]


def _alarms(synthesized: Synthesized) -> list[dict[str, Any]]:
    return [
        alarm["Properties"]
        for role in ("cluster", "gpu-nodes", "observability")
        for alarm in synthesized.resources(role, "AWS::CloudWatch::Alarm").values()
    ]


def _as_list(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


def _settings(synthesized: Synthesized) -> Settings:
    return synthesized.settings


# What the catalog claims, checked against sources we did not write.


@pytest.mark.parametrize(
    "metric",
    [
        m
        for m in (*SCRAPED, *SCRAPED_FOR_DATA_PARALLEL, *SCRAPED_FOR_KV_OFFLOAD)
        if m.in_ray_package
    ],
    ids=lambda m: m.name,
)
def test_catalog_ray_and_vllm_names_appear_in_the_installed_ray(metric) -> None:
    text = (Path(ray.__file__).parent / metric.in_ray_package).read_text()
    assert metric.name in text or metric.name.removeprefix("ray_") in text


def test_every_catalog_entry_says_where_it_comes_from() -> None:
    for metric in (
        *SCRAPED,
        *SCRAPED_FOR_DATA_PARALLEL,
        *SCRAPED_FOR_LATENCY_POLICY,
        *SCRAPED_FOR_KV_OFFLOAD,
        *GENERATED_BY_SCRAPER,
        *CLOUDWATCH_METRICS,
    ):
        assert metric.source, metric.name
        assert metric.meaning, metric.name


# The dashboard and the alert rules against the catalog.


def test_every_promql_query_parses_and_reads_scraped_series_of_one_side(synthesized) -> None:
    kept = (*kept_metrics(_settings(synthesized)), *GENERATED_BY_SCRAPER)
    queried = {name for metric in kept for name in metric.queried_names()}
    queries = _queries(synthesized)
    assert len(queries) > 20
    for query in queries:
        found = selectors(query)  # raises on invalid PromQL
        assert found, query
        for selector in found:
            # By name, never a __name__ regex: in Ray's OpenCensus mode x and x_total share
            # their labels, and a regex matching both breaks increase() and rate().
            assert selector.name in queried, query
            assert "__name__" not in selector.labels, query
            if selector.labels.get("job") == AUTOSCALER_JOB_NAME:
                continue  # whether Ray's autoscaler answers: the head's, not a side's
            assert _side(selector) in GPU_ROLES, query


def _side(selector) -> str | None:
    """Which side a selector reads: the scraper's role label on the pods' own series; the
    deployment name's prefix on the Serve controller's (head) series; the worker group on Ray
    autoscaler's."""
    labels = selector.labels
    if ROLE_LABEL in labels:
        return labels[ROLE_LABEL]
    if "NodeType" in labels:
        return labels["NodeType"]
    for role, prefix in DEPLOYMENT_PREFIX.items():
        if labels.get("deployment", "").startswith(prefix):
            return role
    return None


def test_dashboard_shows_prefill_and_decode_side_by_side(synthesized) -> None:
    graphs = [w for w in _dashboard(synthesized)["widgets"] if w["type"] == "metric"]
    titles = [w["properties"]["title"] for w in graphs]
    by_signal: dict[str, dict[str, dict]] = {}
    for widget, title in zip(graphs, titles, strict=True):
        role, signal = title.split(": ", 1)
        by_signal.setdefault(signal, {})[role] = widget
    required = (
        "GPU utilisation",
        "EFA throughput",
        "Time to first token",
        "Inter-token latency",
        "Requests",
        "KV cache usage",
        "NIXL KV transfer time",
        "NIXL failed transfers",
        "GPU nodes serving",
        "Scaling",
    )
    for word in required:
        (sides,) = [sides for signal, sides in by_signal.items() if signal.startswith(word)]
        assert set(sides) == set(GPU_ROLES), word
        prefill, decode = sides["prefill"], sides["decode"]
        assert prefill["y"] == decode["y"], word  # one row
        assert prefill["x"] < decode["x"], word  # prefill on the left


PREFIX_CACHE_PANEL = "Prefix cache hit rate, vLLM's count (0-1)"
OFFLOAD_PANEL = "KV offload tier: bytes/s stored and read back"


def _read(query: str) -> list[tuple[str, dict[str, str]]]:
    return [(selector.name, selector.labels) for selector in selectors(query)]


def test_each_side_shows_vllms_own_prefix_cache_hit_rate(synthesized) -> None:
    """Hits over queries of the side's own engines (vLLM's counters, role label of the side);
    with a CPU offload tier on prefill, a second prefill line adds the tokens read back."""
    graphs = _graphs(synthesized)
    offloading = kv_offload_sides(_settings(synthesized))
    for role in GPU_ROLES:
        lines = _lines(graphs[f"{role}: {PREFIX_CACHE_PANEL}"])
        assert len(lines) == (2 if role in offloading else 1), role
        own, *overall = lines.values()
        side = {ROLE_LABEL: role}
        assert _read(own) == [
            (PREFIX_CACHE_HITS.stored_name, side),
            (PREFIX_CACHE_QUERIES.stored_name, side),
        ]
        for query in overall:
            assert _read(query) == [
                (PREFIX_CACHE_HITS.stored_name, side),
                (EXTERNAL_PREFIX_CACHE_HITS.stored_name, side),
                (PREFIX_CACHE_QUERIES.stored_name, side),
            ]
    prefill, decode = (graphs[f"{role}: {PREFIX_CACHE_PANEL}"] for role in GPU_ROLES)
    assert (prefill["y"], prefill["x"]) < (decode["y"], decode["x"])
    assert prefill["y"] == decode["y"]


def test_the_offload_row_and_its_series_exist_only_with_a_tier(synthesized) -> None:
    """A configuration with serving.prefill.kv_offload_gib_per_gpu gets the tier's bytes both
    ways and the share of GPU misses it served; one without neither shows nor bills them."""
    settings = _settings(synthesized)
    offloading = kv_offload_sides(settings)
    graphs = _graphs(synthesized)
    kept = set(kept_metrics(settings))
    assert bool(offloading) == (set(SCRAPED_FOR_KV_OFFLOAD) <= kept)
    assert bool(offloading) or not set(SCRAPED_FOR_KV_OFFLOAD) & kept
    for role in GPU_ROLES:
        title = f"{role}: {OFFLOAD_PANEL}"
        assert (title in graphs) == (role in offloading), role
        if role not in offloading:
            continue
        lines = _lines(graphs[title])
        side = {ROLE_LABEL: role}
        assert [_read(query) for query in lines.values()] == [
            [(KV_OFFLOAD_STORE_BYTES.stored_name, side)],
            [(KV_OFFLOAD_LOAD_BYTES.stored_name, side)],
            [
                (EXTERNAL_PREFIX_CACHE_HITS.stored_name, side),
                (EXTERNAL_PREFIX_CACHE_QUERIES.stored_name, side),
            ],
        ]
        (axis,) = [
            i for line in graphs[title]["properties"]["metrics"] for i in line if "yAxis" in i
        ]
        assert axis["yAxis"] == "right"


def test_a_ratio_line_has_no_value_while_its_side_is_idle() -> None:
    """0/0 would draw as a gap or an error depending on the data source: the divisor is
    filtered to growth above zero, so an idle side draws no line."""
    query = promql.side_ratio((PREFIX_CACHE_HITS,), PREFIX_CACHE_QUERIES, "prefill")
    assert query.endswith("[5m])) > 0)")


DP_PANELS = (
    "DP groups of",
    "Per DP rank: failed health checks",
    "Per DP rank: requests",
    "Per DP rank: KV cache usage",
)


def _graphs(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        widget["properties"]["title"]: widget
        for widget in _dashboard(synthesized)["widgets"]
        if widget["type"] == "metric"
    }


def _lines(widget: dict[str, Any]) -> dict[str, str]:
    """Legend -> PromQL of a widget's data source lines."""
    return {
        item["label"]: LAMBDA_QUERY.fullmatch(item["expression"]).group(1)
        for line in widget["properties"]["metrics"]
        for item in line
        if isinstance(item, dict) and "LAMBDA" in item.get("expression", "")
    }


def test_group_and_rank_rows_exist_only_for_sides_with_dp_groups(synthesized) -> None:
    sides = data_parallel_sides(_settings(synthesized))
    for role in GPU_ROLES:
        found = [
            t
            for t in _graphs(synthesized)
            if t.startswith(f"{role}: ") and any(word in t for word in DP_PANELS)
        ]
        assert len(found) == (len(DP_PANELS) if role in sides else 0), role


@pytest.fixture(scope="module")
def latency_policy(synthesize) -> Synthesized:
    return synthesize("default", LATENCY_POLICY)


def test_the_latency_policy_row_shows_each_sides_wish_and_reason(latency_policy) -> None:
    """Under policy latency: one panel per side with the policy's wish, Serve's target and the
    decision's reason; every query parses and reads a series the scraper keeps, of its side."""
    graphs = _graphs(latency_policy)
    assert {title for title in graphs if LATENCY_PANEL in title} == {
        f"{role}: {LATENCY_PANEL}" for role in GPU_ROLES
    }
    kept = {
        name
        for metric in kept_metrics(_settings(latency_policy))
        for name in metric.queried_names()
    }
    for metric in SCRAPED_FOR_LATENCY_POLICY:
        assert metric.name in kept
    queries = [
        query
        for query in _queries(latency_policy)
        if any(metric.name in query for metric in SCRAPED_FOR_LATENCY_POLICY)
    ]
    assert len(queries) == 2 * len(GPU_ROLES)
    for query in queries:
        for selector in selectors(query):
            assert selector.name in kept, query
            assert _side(selector) in GPU_ROLES, query


def test_the_queue_policy_has_no_latency_policy_row_nor_its_series(synthesized) -> None:
    if _settings(synthesized).serving.scaling.policy == "latency":
        pytest.skip("a latency-policy configuration")
    assert not [title for title in _graphs(synthesized) if LATENCY_PANEL in title]
    assert not set(SCRAPED_FOR_LATENCY_POLICY) & set(kept_metrics(_settings(synthesized)))


@pytest.fixture(scope="module")
def dense_prefill(synthesize) -> Synthesized:
    return synthesize("deepseek-v3-pd", DENSE_PREFILL)


def test_a_side_without_dp_keeps_its_half_of_the_group_rows(dense_prefill) -> None:
    """Decode's group and rank panels stay on the right; prefill's half says why it is empty."""
    widgets = _dashboard(dense_prefill)["widgets"]
    decode = [
        w
        for w in widgets
        if w["type"] == "metric" and any(word in w["properties"]["title"] for word in DP_PANELS)
    ]
    assert [w["properties"]["title"].split(": ")[0] for w in decode] == ["decode"] * len(DP_PANELS)
    assert {w["x"] for w in decode} == {12}
    beside = [w for w in widgets if w["x"] == 0 and w["y"] in {d["y"] for d in decode}]
    (note,) = beside  # the first row's note; the others are empty space
    assert note["type"] == "text"
    assert "prefill" in note["properties"]["markdown"]


def test_the_group_panel_counts_groups_of_the_sides_ranks(dense_prefill) -> None:
    ranks = data_parallel_sides(_settings(dense_prefill))["decode"]
    (panel,) = [w for t, w in _graphs(dense_prefill).items() if t.startswith("decode: DP groups")]
    lines = _lines(panel)
    assert f"healthy ranks / {ranks}" in lines
    for legend, query in lines.items():
        if "started" in legend:
            assert selectors(query)[0].name == SERVE_REPLICA_STARTS.stored_name
        else:
            assert f"/ {ranks}" in query, legend
    (axis,) = [i for line in panel["properties"]["metrics"] for i in line if "yAxis" in i]
    assert axis["label"] == "ranks started (5 min)"
    assert axis["yAxis"] == "right"


def test_rank_panels_draw_one_line_per_rank_of_the_side(dense_prefill) -> None:
    graphs = _graphs(dense_prefill)
    requests = _lines(graphs["decode: Per DP rank: requests"])
    kv_cache = _lines(graphs["decode: Per DP rank: KV cache usage (0-1)"])
    expected = {
        "running ${LABEL}": REQUESTS_RUNNING.name,
        "waiting ${LABEL}": REQUESTS_WAITING.name,
    }
    for legend, name in expected.items():
        assert requests[legend].startswith(f"sum by ({', '.join(RANK_LABELS)}) ")
        ((selector,),) = [selectors(requests[legend])]
        assert (selector.name, selector.labels) == (name, {ROLE_LABEL: "decode"})
    (query,) = kv_cache.values()
    assert query.startswith(f"max by ({', '.join(RANK_LABELS)}) ")
    assert selectors(query)[0].name == KV_CACHE_USAGE.name


def test_the_failed_rank_panel_names_replicas_with_their_node(dense_prefill) -> None:
    (panel,) = [
        w for t, w in _graphs(dense_prefill).items() if t.startswith("decode: Per DP rank: failed")
    ]
    (query,) = _lines(panel).values()
    read = {selector.name for selector in selectors(query)}
    assert read == {SERVE_HEALTH_CHECK_FAILURES.stored_name, SERVE_REPLICA_STARTS.stored_name}
    assert "group_left (pod, node)" in query


def test_the_real_exporter_labels_every_vllm_series_with_the_rank_labels() -> None:
    """Captured from Ray 2.58 + vLLM 0.26 engines (tests/data/gpu_check): the labels the rank
    panels group by are on the series they read."""
    read = {REQUESTS_RUNNING.name, REQUESTS_WAITING.name, KV_CACHE_USAGE.name}
    samples = [
        (path.name, sample)
        for path in sorted(CAPTURED.glob("metrics-*.txt"))
        for family in text_string_to_metric_families(path.read_text())
        for sample in family.samples
        if sample.name in read
    ]
    assert {sample.name for _, sample in samples} == read
    for file, sample in samples:
        assert set(RANK_LABELS) <= set(sample.labels), (file, sample.name)


def test_container_insights_panels_use_published_metrics_and_dimensions(synthesized) -> None:
    published = {(m.namespace, m.name): m for m in CLOUDWATCH_METRICS}
    searches = [match for e in _dashboard_expressions(synthesized) for match in SEARCH.findall(e)]
    # GPU and EFA, two metrics each, and the nodes serving, per side
    assert len(searches) == (2 * 2 + 1) * len(GPU_ROLES)
    settings = _settings(synthesized)
    for schema, terms in searches:
        namespace, *dimensions = schema.split(",")
        (name,) = re.findall(r'MetricName="([^"]+)"', terms)
        assert tuple(dimensions) in published[(namespace, name)].dimension_sets
        assert f'ClusterName="{settings.cluster_name}"' in terms
        assert f'Namespace="{settings.serving.namespace}"' in terms
        assert re.search(r"PodName=(prefill|decode)\b", terms)


def test_cloudwatch_alarms_read_published_metrics(synthesized) -> None:
    published = {(m.namespace, m.name): m for m in CLOUDWATCH_METRICS}
    metrics = [
        query["MetricStat"]["Metric"]
        for alarm in _alarms(synthesized)
        for query in alarm.get("Metrics", [])
        if "MetricStat" in query
    ] + [alarm for alarm in _alarms(synthesized) if "MetricName" in alarm]
    # per GPU group: desired and in service; EFA: two; nodes not ready; undelivered events
    assert len(metrics) == 2 * len(GPU_ROLES) + 4
    for metric in metrics:
        entry = published[(metric["Namespace"], metric["MetricName"])]
        dimensions = tuple(d["Name"] for d in metric.get("Dimensions", []))
        assert dimensions in entry.dimension_sets


# Collection.


def test_scraper_keeps_the_catalog_series_of_this_rayservice_labelled_by_side(synthesized) -> None:
    settings = _settings(synthesized)
    (scraper,) = synthesized.resources("observability", "AWS::APS::Scraper").values()
    blob = scraper["Properties"]["ScrapeConfiguration"]["ConfigurationBlob"]["Fn::Base64"]
    config = yaml.safe_load(blob)
    interval = settings.observability.scrape_interval_seconds
    assert config["global"]["scrape_interval"] == f"{interval}s"
    job, autoscaler = config["scrape_configs"]
    _check_autoscaler_job(autoscaler, job)
    (discovery,) = job["kubernetes_sd_configs"]
    assert discovery == {"role": "pod", "namespaces": {"names": [settings.serving.namespace]}}
    relabels = job["relabel_configs"]
    keep_service = relabels[0]
    assert keep_service["action"] == "keep"
    assert re.fullmatch(keep_service["regex"], settings.serving.name)
    targets = {r.get("target_label") for r in relabels}
    assert ROLE_LABEL in targets
    (head,) = [r for r in relabels if r.get("replacement") == HEAD_ROLE]
    assert head["target_label"] == ROLE_LABEL
    (keep_series,) = job["metric_relabel_configs"]
    assert (keep_series["action"], keep_series["source_labels"]) == ("keep", ["__name__"])
    pattern = re.compile(keep_series["regex"])
    # The replica start counter (a series per replica) only where a DP rule and rows read it.
    assert bool(data_parallel_sides(settings)) == bool(
        pattern.fullmatch(SERVE_REPLICA_STARTS.stored_name)
    )
    for metric in kept_metrics(settings):
        assert all(pattern.fullmatch(name) for name in metric.queried_names())
        if metric.kind == "counter":  # the bare name is Ray's OpenCensus duplicate: not billed
            assert not pattern.fullmatch(metric.name)
    assert not pattern.fullmatch("ray_tasks")  # everything else is dropped


def _check_autoscaler_job(autoscaler: dict, ray: dict) -> None:
    """The head pods' metrics-port targets, readdressed to the autoscaler sidecar's port, with
    the same pod labels and the same kept series."""
    assert autoscaler["kubernetes_sd_configs"] == ray["kubernetes_sd_configs"]
    assert autoscaler["metric_relabel_configs"] == ray["metric_relabel_configs"]
    relabels = autoscaler["relabel_configs"]
    (head_only,) = [
        r for r in relabels if r.get("action") == "keep" and r.get("regex") == HEAD_ROLE
    ]
    assert head_only["source_labels"] == ["__meta_kubernetes_pod_label_ray_io_node_type"]
    (address,) = [r for r in relabels if r.get("target_label") == "__address__"]
    assert address["replacement"] == f"$1:{AUTOSCALER_METRICS_PORT}"
    assert address["source_labels"] == ["__meta_kubernetes_pod_ip"]
    assert [r for r in relabels if r not in (head_only, address)] == ray["relabel_configs"]


def test_scraper_reads_the_cluster_from_private_subnets_in_two_zones(synthesized) -> None:
    (scraper,) = synthesized.resources("observability", "AWS::APS::Scraper").values()
    source = scraper["Properties"]["Source"]["EksConfiguration"]
    assert len(source["SubnetIds"]) >= 2
    assert all("PrivateSubnet" in json.dumps(subnet) for subnet in source["SubnetIds"])
    (workspace_id,) = synthesized.resources("observability", "AWS::APS::Workspace")
    destination = scraper["Properties"]["Destination"]["AmpConfiguration"]["WorkspaceArn"]
    assert destination == {"Fn::GetAtt": [workspace_id, "Arn"]}


# Alarms: thresholds from the configuration, all to the encrypted topic.


def test_alert_rules_take_their_thresholds_from_the_configuration(synthesized) -> None:
    alarms = _settings(synthesized).observability.alarms
    rules = {rule["alert"]: rule for rule in _alert_rules(synthesized)}
    nixl = rules["NixlKvTransfersFailing"]["expr"]
    assert "increase(" in nixl  # grew in the window
    assert " offset 5m" in nixl  # or appeared in it (Ray exports a counter from its first +1)
    assert nixl.count("> 0") == 2
    assert rules["DecodeQueueGrowing"]["for"] == f"{alarms.decode_queue_growth_minutes}m"
    assert rules["TimeToFirstTokenAboveObjective"]["expr"].endswith(
        f"> {alarms.ttft_p95_objective_seconds}"
    )
    assert rules["InterTokenLatencyAboveObjective"]["expr"].endswith(
        f"> {alarms.itl_p95_objective_seconds}"
    )
    for name, rule in rules.items():  # the runbook table lists each alert by name
        assert rule["annotations"]["runbook"] == f"docs/observability.md, '{name}'"


def test_node_group_alarms_fire_after_the_configured_shortfall(synthesized) -> None:
    alarms = _settings(synthesized).observability.alarms
    capacity = [a for a in _alarms(synthesized) if "GPU node group" in a["AlarmDescription"]]
    assert len(capacity) == len(GPU_ROLES)
    for alarm in capacity:
        assert alarm["EvaluationPeriods"] == alarms.node_shortfall_minutes
        assert alarm["Threshold"] == 1
    (efa,) = [a for a in _alarms(synthesized) if "EFA" in a["AlarmDescription"]]
    assert efa["Threshold"] == alarms.efa_error_events_threshold


def test_every_alarm_and_alert_notifies_the_encrypted_topic(synthesized) -> None:
    settings = _settings(synthesized)
    (topic_id, topic), *_ = synthesized.resources("cluster", "AWS::SNS::Topic").items()
    assert "KmsMasterKeyId" in topic["Properties"]
    emails = sorted(
        s["Properties"]["Endpoint"]
        for s in synthesized.resources("cluster", "AWS::SNS::Subscription").values()
    )
    assert emails == sorted(str(e) for e in settings.observability.alarms.emails)
    for alarm in _alarms(synthesized):
        for action in alarm["AlarmActions"] + alarm["OKActions"]:
            # The topic itself in the cluster stack, its export in the observability stack.
            assert action == {"Ref": topic_id} or topic_id in action["Fn::ImportValue"]
    (key_id,) = synthesized.resources("cluster", "AWS::KMS::Key").keys() & {
        topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    }
    key_policy = synthesized.templates["cluster"]["Resources"][key_id]["Properties"]["KeyPolicy"]
    encrypting = {
        principal
        for statement in key_policy["Statement"]
        if "kms:GenerateDataKey*" in _as_list(statement["Action"])
        for principal in _as_list(statement["Principal"].get("Service", []))
    }
    assert encrypting >= set(PUBLISHERS)  # each publisher can encrypt its messages
    (policy,) = synthesized.resources("cluster", "AWS::SNS::TopicPolicy").values()
    publishers = {
        principal
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "sns:Publish" in _as_list(statement["Action"]) and statement["Effect"] == "Allow"
        for principal in _as_list(statement["Principal"]["Service"])
    }
    assert publishers >= set(PUBLISHERS)
    (workspace,) = synthesized.resources("observability", "AWS::APS::Workspace").values()
    definition = yaml.safe_load(cfn_text(workspace["Properties"]["AlertManagerDefinition"]))
    (receiver,) = yaml.safe_load(definition["alertmanager_config"])["receivers"]
    (sns_config,) = receiver["sns_configs"]
    assert sns_config["sigv4"]["region"] == settings.region
    parts = workspace["Properties"]["AlertManagerDefinition"]["Fn::Join"][1]
    (topic_arn,) = [part for part in parts if isinstance(part, dict)]
    assert topic_id in topic_arn["Fn::ImportValue"]
    (rule,) = synthesized.resources("observability", "AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"]["source"] == ["aws.health"]
    (target,) = rule["Properties"]["Targets"]
    assert topic_id in target["Arn"]["Fn::ImportValue"]  # the cluster stack's topic


# Add-ons and self-healing.


def test_observability_addons_are_pinned_and_the_agent_role_trusts_one_account(
    synthesized,
) -> None:
    addons = {
        a["Properties"]["AddonName"]: a["Properties"]
        for a in synthesized.resources("cluster", "AWS::EKS::Addon").values()
    }
    cloudwatch = addons[CLOUDWATCH_OBSERVABILITY.name]
    assert cloudwatch["AddonVersion"] == CLOUDWATCH_OBSERVABILITY.version
    kubernetes = json.loads(cloudwatch["ConfigurationValues"])["agent"]["config"]["logs"][
        "metrics_collected"
    ]["kubernetes"]
    assert kubernetes == {"enhanced_container_insights": True, "accelerated_compute_metrics": True}
    role_id = cloudwatch["ServiceAccountRoleArn"]["Fn::GetAtt"][0]
    statement, claims = synthesized.irsa_trust("cluster", role_id)
    subject = (
        f"system:serviceaccount:{CLOUDWATCH_AGENT_NAMESPACE}:{CLOUDWATCH_AGENT_SERVICE_ACCOUNT}"
    )
    assert subject in claims
    assert "sts.amazonaws.com" in claims
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    monitoring = addons[NODE_MONITORING_AGENT.name]
    assert monitoring["AddonVersion"] == NODE_MONITORING_AGENT.version
    assert "ServiceAccountRoleArn" not in monitoring  # it needs no AWS permissions
    tolerated = {
        (t["key"], t["value"])
        for t in json.loads(monitoring["ConfigurationValues"])["dcgmAgent"]["tolerations"]
    }
    for placement in synthesized.settings.gpu_nodes.placements():
        assert {(t.key, t.value) for t in placement.taints} <= tolerated


def test_container_insights_log_groups_are_ours_encrypted_and_kept(synthesized) -> None:
    settings = _settings(synthesized)
    groups = {
        cfn_text(g["Properties"]["LogGroupName"]): g
        for g in synthesized.resources("cluster", "AWS::Logs::LogGroup").values()
        if cfn_text(g["Properties"].get("LogGroupName", "")).startswith("/aws/containerinsights/")
    }
    kinds = log_group_kinds(settings.observability.container_logs)
    for kind in kinds:
        group = groups[log_group_name(settings.cluster_name, kind)]
        assert group["Properties"]["RetentionInDays"] == settings.observability.log_retention_days
        assert "KmsKeyId" in group["Properties"]
        # Kept on destroy, deleted when the create that made them rolls back: their names are
        # fixed, so a retained leftover of a failed first deploy would fail the retry.
        expected = "RetainExceptOnCreate" if settings.retain_data_on_destroy else "Delete"
        assert group["DeletionPolicy"] == expected
    assert len(groups) == len(kinds)


def test_both_gpu_node_groups_repair_themselves_one_node_at_a_time(synthesized) -> None:
    groups = [
        g["Properties"]
        for g in synthesized.resources("gpu-nodes", "AWS::EKS::Nodegroup").values()
        if g["Properties"].get("AmiType") == "AL2023_x86_64_NVIDIA"
    ]
    assert len(groups) == len(GPU_ROLES)
    for group in groups:
        assert group["NodeRepairConfig"] == {"Enabled": True, "MaxParallelNodesRepairedCount": 1}


# The CloudWatch data source.


def test_data_source_can_query_only_its_workspace_and_cloudwatch_may_invoke_it(
    synthesized,
) -> None:
    (function_id, function), *_ = synthesized.resources(
        "observability", "AWS::Lambda::Function"
    ).items()
    tags = {t["Key"]: t["Value"] for t in function["Properties"]["Tags"]}
    assert tags["cloudwatch:datasource"] == "custom"
    (permission,) = synthesized.resources("observability", "AWS::Lambda::Permission").values()
    assert permission["Properties"]["Principal"] == "lambda.datasource.cloudwatch.amazonaws.com"
    assert "SourceAccount" in permission["Properties"]
    policies = synthesized.resources("observability", "AWS::IAM::Policy").values()
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    (query,) = [s for s in statements if s["Action"] == "aps:QueryMetrics"]
    (workspace_id,) = synthesized.resources("observability", "AWS::APS::Workspace")
    assert query["Resource"] == {"Fn::GetAtt": [workspace_id, "Arn"]}
    (dashboard,) = synthesized.resources("observability", "AWS::CloudWatch::Dashboard").values()
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    called = [
        parts[index + 1]
        for index, part in enumerate(parts)
        if isinstance(part, str) and part.endswith("LAMBDA('")
    ]
    assert len(called) == len(LAMBDA_QUERY.findall(" ".join(_dashboard_expressions(synthesized))))
    assert all(name == {"Ref": function_id} for name in called)  # this function, every time


def test_addons_wait_for_nodes_and_the_observability_stack_for_the_service(synthesized) -> None:
    """Add-ons whose pods need a node would leave the add-on DEGRADED and fail the stack; the
    scraper's alert rules are about the RayService, which must exist first."""
    resources = synthesized.templates["cluster"]["Resources"]
    (system_nodes,) = [lid for lid in resources if lid.startswith("SystemNodesNodegroup")]
    for addon in synthesized.resources("cluster", "AWS::EKS::Addon").values():
        if addon["Properties"]["AddonName"] in (
            CLOUDWATCH_OBSERVABILITY.name,
            NODE_MONITORING_AGENT.name,
        ):
            assert system_nodes in addon["DependsOn"]
    assert "serving" in synthesized.dependencies("observability")


def test_the_autoscaler_port_the_scraper_reads_is_rays_own() -> None:
    """KubeRay 1.7 does not declare the sidecar's port, so the scraper names it by number."""
    from ray.autoscaler._private.constants import AUTOSCALER_METRIC_PORT

    assert AUTOSCALER_METRICS_PORT == AUTOSCALER_METRIC_PORT
