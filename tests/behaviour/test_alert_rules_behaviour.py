"""The alert rules evaluated on input series by Prometheus itself (`promtool test rules`), not
only parsed: each test feeds the series a Ray pod would export and says which alerts fire when.

promtool comes from Debian's `prometheus` package (2.42), which `make setup-dev` installs (as root;
elsewhere it stops with one line saying so). Missing promtool fails these tests: no silent skip.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app_config import Settings
from catalog.metrics import (
    DEPLOYMENT_PREFIX,
    INTER_TOKEN_LATENCY,
    NIXL_FAILED_TRANSFERS,
    REQUESTS_WAITING,
    SCRAPE_UP,
    SERVE_HEALTHY_REPLICAS,
    SERVE_TARGET_REPLICAS,
    TTFT,
)
from monitoring import promql
from monitoring.alert_rules import EVALUATION_INTERVAL, render_alert_rules
from monitoring.scrape_config import AUTOSCALER_JOB_NAME
from tests.configurations import settings_for
from tests.scan_cache import scan_once

BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0)


def p95_when_all_in(bound: float) -> float:
    """histogram_quantile's estimate when every observation fell in the bucket ending at
    ``bound``: linear interpolation inside the bucket."""
    lower = max((b for b in BUCKETS if b < bound), default=0.0)
    return lower + 0.95 * (bound - lower)


@pytest.fixture(scope="module")
def settings() -> Settings:
    return settings_for("default")


@pytest.fixture(scope="module")
def rules(settings: Settings) -> dict[str, dict[str, Any]]:
    (group,) = render_alert_rules(settings)["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


def run_promtool(
    promtool: str, tmp_path: Path, rules: dict[str, Any], tests: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False, width=1000))
    suite = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": EVALUATION_INTERVAL,
        "tests": tests,
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(suite, sort_keys=False, width=1000))
    command = [promtool, "test", "rules", "test.yaml"]

    def run() -> dict[str, Any]:
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    # Prometheus's verdict on the same rules and series is the same: a passing one is kept
    # (tests/scan_cache.py), keyed by both files and the promtool binary's identity.
    binary = Path(promtool).resolve().stat()
    found = scan_once(
        "promtool",
        f"{Path(promtool).resolve()} {binary.st_size} {binary.st_mtime_ns}",
        [(name, tmp_path / name) for name in ("rules.yaml", "test.yaml")],
        run,
        clean=lambda result: result["returncode"] == 0,
    )
    return subprocess.CompletedProcess(
        command, found["returncode"], found["stdout"], found["stderr"]
    )


def expect_alerts(
    promtool: str,
    tmp_path: Path,
    settings: Settings,
    series: list[dict[str, str]],
    checks: list[tuple[str, str, list[dict[str, str]]]],
) -> None:
    """``checks``: (alert name, evaluation time, label sets of the alerts that must fire then;
    empty for none). Annotations are the rule's own."""
    rendered = render_alert_rules(settings)
    (group,) = rendered["groups"]
    by_name = {rule["alert"]: rule for rule in group["rules"]}
    alert_tests = [
        {
            "eval_time": at,
            "alertname": name,
            "exp_alerts": [
                {
                    "exp_labels": {**labels, **by_name[name]["labels"]},
                    "exp_annotations": by_name[name]["annotations"],
                }
                for labels in firing
            ],
        }
        for name, at, firing in checks
    ]
    result = run_promtool(
        promtool,
        tmp_path,
        rendered,
        [{"interval": "1m", "input_series": series, "alert_rule_test": alert_tests}],
    )
    assert result.returncode == 0, result.stdout + result.stderr


def counter(metric_name: str, role: str, values: str, pod: str) -> dict[str, str]:
    return {"series": f'{metric_name}{{role="{role}",pod="{pod}"}}', "values": values}


def histogram(metric: Any, role: str, le_counts: dict[float, str], pod: str) -> list[dict]:
    """Cumulative bucket series; ``le_counts`` maps each bound to its promtool value string."""
    return [
        {
            "series": f'{metric.name}_bucket{{role="{role}",pod="{pod}",le="{bound}"}}',
            "values": values,
        }
        for bound, values in le_counts.items()
    ]


def healthy_scrapes(settings: Settings) -> list[dict[str, str]]:
    return [
        {"series": f'{SCRAPE_UP.name}{{role="{role}",pod="{role}-0"}}', "values": "1x60"}
        for role in settings.gpu_nodes.groups()
    ] + [autoscaler_up("1x60")]


def autoscaler_up(values: str, cluster: str = "c1") -> dict[str, str]:
    """The scraper's up series for a head pod's autoscaler target (scrape_config.py's job)."""
    labels = f'job="{AUTOSCALER_JOB_NAME}",role="head",ray_cluster="{cluster}"'
    return {"series": f"{SCRAPE_UP.name}{{{labels}}}", "values": values}


def test_an_autoscaler_that_stops_answering_pages_after_ten_minutes(promtool, tmp_path, settings):
    """Its sidecar died (or hangs with its port closed): every worker count is frozen."""
    workers = healthy_scrapes(settings)[:-1]
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        [*workers, autoscaler_up("1x5 0x60")],
        [("RayAutoscalerDown", "14m", []), ("RayAutoscalerDown", "17m", [{}])],
    )


def test_a_second_ray_clusters_autoscaler_keeps_the_alert_quiet(promtool, tmp_path, settings):
    """During a NewCluster upgrade the old head goes away while the new one answers."""
    workers = healthy_scrapes(settings)[:-1]
    series = [*workers, autoscaler_up("1x20", "old"), autoscaler_up("_x5 1x55", "new")]
    expect_alerts(promtool, tmp_path, settings, series, [("RayAutoscalerDown", "40m", [])])


# Ray's two export modes. The OpenTelemetry exporter writes a counter as x_total; the
# OpenCensus one writes x_total *and* x with the same labels. Both must work.
EXPORT_MODES = {
    "opentelemetry": (NIXL_FAILED_TRANSFERS.stored_name,),
    "opencensus": (NIXL_FAILED_TRANSFERS.stored_name, NIXL_FAILED_TRANSFERS.name),
}


@pytest.mark.parametrize("mode", EXPORT_MODES)
def test_failed_nixl_transfers_page_in_either_export_mode(promtool, tmp_path, settings, mode):
    series = [
        counter(name, "decode", "0x10 1 2 2x30", "decode-0") for name in EXPORT_MODES[mode]
    ] + healthy_scrapes(settings)
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        series,
        [
            ("NixlKvTransfersFailing", "9m", []),
            ("NixlKvTransfersFailing", "12m", [{}]),
            ("NixlKvTransfersFailing", "25m", []),  # no new failure in the last 5 minutes
        ],
    )


def test_a_failure_counter_born_with_its_first_failure_pages(promtool, tmp_path, settings):
    """Ray exports a labelled counter only from its first increment: increase() sees nothing."""
    series = [
        counter(NIXL_FAILED_TRANSFERS.stored_name, "decode", "_x10 3x30", "decode-0"),
        *healthy_scrapes(settings),
    ]
    expect_alerts(promtool, tmp_path, settings, series, [("NixlKvTransfersFailing", "11m", [{}])])


def test_the_old_name_regex_breaks_increase_in_opencensus_mode(promtool, tmp_path) -> None:
    """Why the selector reads x_total by name: the regex that matched both spellings returns
    two series with one label set once increase() drops the names, and Prometheus refuses."""
    name = NIXL_FAILED_TRANSFERS.name
    old = f'sum(increase({{__name__=~"{name}(_total)?",role="decode"}}[5m]))'
    result = _evaluate_on_both_spellings(promtool, tmp_path, old, [])
    assert result.returncode != 0
    assert "vector cannot contain metrics with the same labelset" in result.stdout + result.stderr
    current = promql.increase(NIXL_FAILED_TRANSFERS, "decode")
    result = _evaluate_on_both_spellings(promtool, tmp_path, current, [{"value": 5}])
    assert result.returncode == 0, result.stdout + result.stderr


def _evaluate_on_both_spellings(
    promtool: str, tmp_path: Path, expr: str, samples: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """``expr`` at minute 8 over a counter growing by one a minute, exported under both names."""
    series = [counter(n, "decode", "0+1x10", "decode-0") for n in EXPORT_MODES["opencensus"]]
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [{"expr": expr, "eval_time": "8m", "exp_samples": samples}],
    }
    return run_promtool(promtool, tmp_path, {"groups": []}, [test])


def test_decode_queue_pages_only_after_growing_for_the_configured_minutes(
    promtool, tmp_path, settings
):
    minutes = settings.observability.alarms.decode_queue_growth_minutes
    series = [
        {"series": f'{REQUESTS_WAITING.name}{{role="decode",pod="decode-0"}}', "values": values}
        for values in ("0x5 1+1x40",)
    ] + healthy_scrapes(settings)
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        series,
        [
            ("DecodeQueueGrowing", f"{5 + minutes - 2}m", []),
            ("DecodeQueueGrowing", f"{5 + minutes + 3}m", [{}]),
        ],
    )


def test_a_steady_decode_queue_does_not_page(promtool, tmp_path, settings):
    series = [
        {"series": f'{REQUESTS_WAITING.name}{{role="decode",pod="decode-0"}}', "values": "7x40"},
        *healthy_scrapes(settings),
    ]
    expect_alerts(promtool, tmp_path, settings, series, [("DecodeQueueGrowing", "30m", [])])


def _latency_buckets(metric: Any, role: str, slow_bound: float) -> list[dict[str, str]]:
    """Ten observations a minute, every one of them at ``slow_bound`` seconds."""
    return histogram(
        metric,
        role,
        {
            **{b: "0x40" for b in BUCKETS if b < slow_bound},
            **{b: "0+10x40" for b in BUCKETS if b >= slow_bound},
            "+Inf": "0+10x40",
        },
        f"{role}-0",
    )


def test_inter_token_latency_pages_above_its_objective_and_not_below(promtool, tmp_path):
    settings = settings_for("default")
    objective = settings.observability.alarms.itl_p95_objective_seconds
    slow = min(b for b in BUCKETS if p95_when_all_in(b) > objective)
    fast = max(b for b in BUCKETS if p95_when_all_in(b) < objective)
    for bound, firing in ((slow, [{}]), (fast, [])):
        series = _latency_buckets(INTER_TOKEN_LATENCY, "decode", bound) + healthy_scrapes(settings)
        expect_alerts(
            promtool,
            tmp_path,
            settings,
            series,
            [("InterTokenLatencyAboveObjective", "15m", firing)],
        )


def test_time_to_first_token_adds_both_sides_p95(promtool, tmp_path, settings):
    """Each side alone under the objective, their sum above it: the client's TTFT is both."""
    objective = settings.observability.alarms.ttft_p95_objective_seconds
    each = max(b for b in BUCKETS if p95_when_all_in(b) < objective < 2 * p95_when_all_in(b))
    series = (
        _latency_buckets(TTFT, "prefill", each)
        + _latency_buckets(TTFT, "decode", each)
        + healthy_scrapes(settings)
    )
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        series,
        [("TimeToFirstTokenAboveObjective", "15m", [{}])],
    )


def test_a_side_whose_scrapes_stop_pages_after_ten_minutes(promtool, tmp_path, settings):
    series = [
        {"series": f'{SCRAPE_UP.name}{{role="prefill",pod="prefill-0"}}', "values": "1x60"},
        # decode's pod fails its scrapes for a while, then its target disappears
        {"series": f'{SCRAPE_UP.name}{{role="decode",pod="decode-0"}}', "values": "1x5 0x10"},
    ]
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        series,
        [
            ("ServingMetricsMissing", "14m", []),
            ("ServingMetricsMissing", "17m", [{"role": "decode"}]),
            ("ServingMetricsMissing", "40m", [{"role": "decode"}]),
        ],
    )


def test_healthy_scrapes_raise_no_alert(promtool, tmp_path, settings):
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        healthy_scrapes(settings),
        [(name, "30m", []) for name in render_alert_names(settings)],
    )


def render_alert_names(settings: Settings) -> list[str]:
    (group,) = render_alert_rules(settings)["groups"]
    return [rule["alert"] for rule in group["rules"]]


def replicas(role: str, cluster: str, target: str, healthy: list[str]) -> list[dict[str, str]]:
    """What a Ray cluster's Serve controller (on its head) exports for one side: the autoscaler's
    target, and one 1/0 series per replica (Ray 2.58's default, high-cardinality tags)."""
    deployment = f"{DEPLOYMENT_PREFIX[role]}Qwen--Qwen3-32B"
    common = f'deployment="{deployment}",application="pd-llm",role="head",ray_cluster="{cluster}"'
    return [{"series": f"{SERVE_TARGET_REPLICAS.name}{{{common}}}", "values": target}] + [
        {
            "series": f'{SERVE_HEALTHY_REPLICAS.name}{{{common},replica="r{index}"}}',
            "values": values,
        }
        for index, values in enumerate(healthy)
    ]


def test_a_side_short_of_replicas_pages_after_the_configured_minutes(
    promtool, tmp_path, settings
) -> None:
    """Prefill wants 2 replicas and has 1 healthy from minute 0; decode has what it wants."""
    minutes = settings.observability.alarms.capacity_shortfall_minutes
    series = [
        *replicas("prefill", "pd-llm-a", f"2x{minutes + 20}", [f"1x{minutes + 20}"]),
        *replicas("decode", "pd-llm-a", f"1x{minutes + 20}", [f"1x{minutes + 20}"]),
        *healthy_scrapes(settings),
    ]
    firing = [{"role": "prefill", "ray_cluster": "pd-llm-a"}]
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        series,
        [
            ("ServingCapacityShortfall", f"{minutes - 2}m", []),
            ("ServingCapacityShortfall", f"{minutes + 2}m", firing),
        ],
    )


def test_a_side_with_no_replica_at_all_counts_as_short(promtool, tmp_path, settings) -> None:
    """Before any replica exists there is no healthy series: that is zero, not unknown."""
    minutes = settings.observability.alarms.capacity_shortfall_minutes
    series = [*replicas("decode", "pd-llm-a", f"1x{minutes + 20}", []), *healthy_scrapes(settings)]
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        series,
        [
            (
                "ServingCapacityShortfall",
                f"{minutes + 2}m",
                [{"role": "decode", "ray_cluster": "pd-llm-a"}],
            )
        ],
    )


def test_a_new_ray_cluster_filling_up_within_the_bound_does_not_page(
    promtool, tmp_path, settings
) -> None:
    """A NewCluster upgrade: the new cluster wants its replicas while the old one serves; its
    replicas turn healthy 20 minutes later (node, image, model), inside the bound."""
    minutes = settings.observability.alarms.capacity_shortfall_minutes
    assert minutes > 20
    span = minutes + 20
    series = [
        *replicas("decode", "pd-llm-old", f"1x{span}", [f"1x{span}"]),
        *replicas("decode", "pd-llm-new", f"1x{span}", [f"_x20 1x{span - 20}"]),
        *healthy_scrapes(settings),
    ]
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        series,
        [
            ("ServingCapacityShortfall", "15m", []),
            ("ServingCapacityShortfall", f"{minutes + 5}m", []),
        ],
    )
