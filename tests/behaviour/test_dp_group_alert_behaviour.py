"""DPGroupRestarting evaluated by Prometheus itself (`promtool test rules`) on the series Ray
Serve 2.58 exports while a side's DP groups start, scale, fail and restart.

What moves, read from ray-project/ray 2.58.0 (python/ray/serve/...):
- A replica actor increments ``serve_deployment_replica_starts`` once, in its metrics manager's
  constructor (_private/replica.py:402-408), created right after the Serve context is set
  (replica.py:1106-1108) and before the user class (DPServer, the vLLM engine) loads. Labels:
  deployment, replica, application (metrics.py:14-57). A restarted rank is a new actor with a
  new replica id (deployment_state.py:4218-4221, ``ReplicaID(get_random_string())`` for every
  member of a new gang): a new series born at 1, on the rank's worker pod.
- The controller sets ``serve_deployment_replica_healthy`` to 1 for each replica that passes
  its health check (deployment_state.py _process_healthy_replica, _set_health_gauge:4582-4594)
  and to 0 when it stops one (_stop_replica:4608-4617). Under RESTART_GANG one unhealthy or
  missing member stops every member of its gang, healthy ones included, in the same pass
  (_forcefully_stop_gang_replicas:4658-4740, called from check_and_update_replicas:4912-4925),
  so the healthy count drops by whole groups.
- ``serve_autoscaling_target_replicas`` is set with every new target (deployment_state.py:3549,
  3593); for a gang deployment the autoscaling policy rounds it up to whole gangs
  (_private/gang_scheduling_autoscaling_policy.py:33-34), and a gang's replicas are created only
  once its placement group is reserved (deployment_state.py:4180-4230): a scale-up's ranks
  start when the nodes are there, minutes after the target rose.
Ray's DPServer asks for exactly this: gang_size = data_parallel_size, PACK, RESTART_GANG
(ray/llm/_internal/serve/serving_patterns/data_parallel/dp_server.py:285-289).

A stopped replica's gauge either stays at 0 or leaves the exporter once not refreshed (the
agent evicts gauges after two export intervals, _private/telemetry/
open_telemetry_metric_recorder.py:90-116, 133-149); every scenario runs both ways.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app_config import Settings
from catalog.metrics import (
    DEPLOYMENT_PREFIX,
    SERVE_HEALTH_CHECK_FAILURES,
    SERVE_HEALTHY_REPLICAS,
    SERVE_REPLICA_STARTS,
    SERVE_TARGET_REPLICAS,
)
from monitoring import promql
from monitoring.alert_rules import PARTIAL_GROUP_MINUTES, render_alert_rules
from monitoring.data_parallel import data_parallel_sides
from tests.behaviour.test_alert_rules_behaviour import (
    expect_alerts,
    healthy_scrapes,
    run_promtool,
)
from tests.configurations import settings_for

ALERT = "DPGroupRestarting"
SPAN = 120  # minutes of input series
CLUSTER = "pd-llm-a"
STOPPED_GAUGE = ("stays-zero", "goes-stale")


@pytest.fixture(scope="module")
def settings() -> Settings:
    """DeepSeek-V3's example with a dense prefill: decode's replicas are DP groups of 16 ranks,
    prefill's single engines."""
    return settings_for(
        "deepseek-v3-pd",
        **{
            "serving.prefill.data_parallel_size": "1",
            "serving.prefill.tensor_parallel_size": "8",
            "serving.prefill.expert_parallel": "false",
        },
    )


@pytest.fixture(scope="module")
def ranks(settings: Settings) -> int:
    return data_parallel_sides(settings)["decode"]


@pytest.fixture(scope="module")
def window(settings: Settings) -> int:
    return settings.observability.alarms.capacity_shortfall_minutes


@dataclass(frozen=True)
class Rank:
    """One Serve replica of a DP side, in minutes from the start of the series."""

    started: int  # its actor started: its starts series is born at 1
    healthy: int | None = None  # it first passed a health check (None: never)
    stopped: int | None = None  # Serve stopped it


def group(count: int, started: int, healthy: int | None, stopped: int | None = None) -> list:
    """A gang: every rank starts together; ranks turn healthy over a minute or two, as their
    engines finish loading at slightly different times (the last one ``healthy``)."""
    return [
        Rank(started, None if healthy is None else max(started, healthy - (i % 3)), stopped)
        for i in range(count)
    ]


def _tokens(values: dict[int, str]) -> str:
    return " ".join(values.get(minute, "_") for minute in range(SPAN))


def side_series(
    role: str, target: dict[int, int], ranks: list[Rank], stopped_gauge: str
) -> list[dict[str, str]]:
    """The side's series of one Ray cluster: the controller's target and health gauges (on the
    head) and each replica's start counter (on its worker pod). ``target``: minute -> value
    from that minute on."""
    deployment = f"{DEPLOYMENT_PREFIX[role]}deepseek-ai--DeepSeek-V3"
    head = f'deployment="{deployment}",application="pd-llm",role="head",ray_cluster="{CLUSTER}"'
    changes = sorted(target.items())
    wanted = {
        minute: str(next(v for m, v in reversed(changes) if m <= minute))
        for minute in range(changes[0][0], SPAN)
    }
    series = [{"series": f"{SERVE_TARGET_REPLICAS.name}{{{head}}}", "values": _tokens(wanted)}]
    for index, rank in enumerate(ranks):
        replica = f"r{index}"
        pod = f'role="{role}",ray_cluster="{CLUSTER}",pod="{role}-{index // 8}"'
        starts = {minute: "1" for minute in range(rank.started, SPAN)}
        series.append(
            {
                "series": f'{SERVE_REPLICA_STARTS.stored_name}{{deployment="{deployment}",'
                f'application="pd-llm",replica="{replica}",{pod}}}',
                "values": _tokens(starts),
            }
        )
        health: dict[int, str] = {}
        end = SPAN if rank.stopped is None else rank.stopped
        if rank.healthy is not None:
            health.update({minute: "1" for minute in range(rank.healthy, end)})
        if rank.stopped is not None:
            if stopped_gauge == "stays-zero":
                health.update({minute: "0" for minute in range(rank.stopped, SPAN)})
            else:
                health.update({rank.stopped: "0", rank.stopped + 1: "stale"})
        if health:
            series.append(
                {
                    "series": f'{SERVE_HEALTHY_REPLICAS.name}{{{head},replica="{replica}"}}',
                    "values": _tokens(health),
                }
            )
    return series


def check(
    promtool: str,
    tmp_path,
    settings: Settings,
    series: list[dict[str, str]],
    firing: dict[int, bool],
    alert: str = ALERT,
) -> None:
    """``firing``: evaluation minute -> whether decode's alert fires then."""
    labels = [{"role": "decode", "ray_cluster": CLUSTER}]
    expect_alerts(
        promtool,
        tmp_path,
        settings,
        [*series, *healthy_scrapes(settings)],
        [(alert, f"{minute}m", labels if fires else []) for minute, fires in firing.items()],
    )


def test_the_rule_watches_only_sides_with_dp_groups(settings: Settings) -> None:
    (group_,) = render_alert_rules(settings)["groups"]
    (rule,) = [r for r in group_["rules"] if r["alert"] == ALERT]
    assert DEPLOYMENT_PREFIX["decode"] in rule["expr"]
    assert DEPLOYMENT_PREFIX["prefill"] not in rule["expr"]
    assert f"% {data_parallel_sides(settings)['decode']})" in rule["expr"]
    window = settings.observability.alarms.capacity_shortfall_minutes
    assert f"[{window}m:1m]" in rule["expr"]  # hands over to ServingCapacityShortfall
    assert f"[{PARTIAL_GROUP_MINUTES}m:1m]" in rule["expr"]
    for dense in ("default", "quickstart"):
        (group_,) = render_alert_rules(settings_for(dense))["groups"]
        assert ALERT not in [r["alert"] for r in group_["rules"]], dense


@pytest.mark.parametrize("stopped_gauge", STOPPED_GAUGE)
def test_a_gang_restart_pages_until_the_group_is_healthy_again(
    promtool, tmp_path, settings, ranks, stopped_gauge
) -> None:
    """Two groups serve; at minute 40 one rank of the second fails its health check and Serve
    stops all of its group; the new ranks start a minute later and serve from minute 50."""
    series = side_series(
        "decode",
        {0: 2 * ranks},
        [
            *group(ranks, 0, 2),
            *group(ranks, 0, 2, stopped=40),
            *group(ranks, 41, 50),
        ],
        stopped_gauge,
    )
    check(
        promtool,
        tmp_path,
        settings,
        series,
        {39: False, 42: True, 48: True, 53: False, 80: False},
    )


@pytest.mark.parametrize("stopped_gauge", STOPPED_GAUGE)
def test_a_group_waiting_for_a_new_node_hands_over_to_capacity_shortfall(
    promtool, tmp_path, settings, ranks, window, stopped_gauge
) -> None:
    """The failed rank's node is gone: the group's new placement group waits for a node. The
    restart pages from the stop until the window has passed; by then ServingCapacityShortfall
    (the side short for capacity_shortfall_minutes) has taken over."""
    stop = 40
    series = side_series(
        "decode",
        {0: 2 * ranks},
        [*group(ranks, 0, 2), *group(ranks, 0, 2, stopped=stop)],
        stopped_gauge,
    )
    check(promtool, tmp_path, settings, series, {42: True, stop + window - 2: True})
    check(
        promtool,
        tmp_path,
        settings,
        series,
        {stop + window + 3: True},
        alert="ServingCapacityShortfall",
    )


@pytest.mark.parametrize("stopped_gauge", STOPPED_GAUGE)
def test_a_new_group_that_fails_while_starting_pages_on_its_second_start(
    promtool, tmp_path, settings, ranks, stopped_gauge
) -> None:
    """A scale-up to two groups whose new group dies while loading (a rank's node without a
    working EFA device: nixlNotFoundError) and is started again, never healthy: no healthy rank
    was lost, but more ranks started than the scale-up asked for."""
    attempts = [
        rank
        for start in (35, 43, 51, 59, 67)
        for rank in group(ranks, start, None, stopped=start + 7)
    ]
    series = side_series(
        "decode", {0: ranks, 30: 2 * ranks}, [*group(ranks, 0, 2), *attempts], stopped_gauge
    )
    check(promtool, tmp_path, settings, series, {40: False, 45: True, 70: True})


@pytest.mark.parametrize("stopped_gauge", STOPPED_GAUGE)
def test_a_first_deploy_does_not_page(promtool, tmp_path, settings, ranks, stopped_gauge):
    """The target appears with two groups; their nodes come 10 minutes later, the engines
    load for another 10."""
    series = side_series(
        "decode",
        {5: 2 * ranks},
        [*group(ranks, 15, 25), *group(ranks, 16, 26)],
        stopped_gauge,
    )
    check(
        promtool,
        tmp_path,
        settings,
        series,
        {minute: False for minute in (10, 17, 24, 27, 40, 60, 100)},
    )


@pytest.mark.parametrize("stopped_gauge", STOPPED_GAUGE)
def test_a_scale_up_by_one_whole_group_does_not_page(
    promtool, tmp_path, settings, ranks, window, stopped_gauge
) -> None:
    """The target rises by a group at minute 35; its nodes take longer than the window to come
    (the ranks start at 35 + window + 5), the engines load for 8 minutes."""
    start = 35 + window + 5
    series = side_series(
        "decode",
        {0: ranks, 35: 2 * ranks},
        [*group(ranks, 0, 2), *group(ranks, start, start + 8)],
        stopped_gauge,
    )
    check(
        promtool,
        tmp_path,
        settings,
        series,
        {minute: False for minute in (40, start + 1, start + 7, start + 10, SPAN - 1)},
    )


@pytest.mark.parametrize("stopped_gauge", STOPPED_GAUGE)
def test_a_scale_down_and_up_again_does_not_page(
    promtool, tmp_path, settings, ranks, stopped_gauge
) -> None:
    """Load drops and comes back: Serve releases a group at minute 30 and adds one at 38.
    The healthy count falls, but the target fell first."""
    series = side_series(
        "decode",
        {0: 2 * ranks, 30: ranks, 38: 2 * ranks},
        [*group(ranks, 0, 2), *group(ranks, 0, 2, stopped=30), *group(ranks, 40, 48)],
        stopped_gauge,
    )
    check(
        promtool,
        tmp_path,
        settings,
        series,
        {minute: False for minute in (31, 39, 42, 47, 60)},
    )


def test_a_scale_down_scraped_before_its_target_does_not_page(
    promtool, tmp_path, settings, ranks
) -> None:
    """The healthy gauges fall one scrape before the target does (two gauges of one
    controller, one export apart): the rule's one minute absorbs it."""
    series = side_series(
        "decode",
        {0: 2 * ranks, 31: ranks},
        [*group(ranks, 0, 2), *group(ranks, 0, 2, stopped=30)],
        "stays-zero",
    )
    check(promtool, tmp_path, settings, series, {30: False, 31: False, 32: False, 40: False})


def test_a_steady_side_does_not_page(promtool, tmp_path, settings, ranks) -> None:
    series = side_series("decode", {0: 2 * ranks}, [*group(ranks, 0, 2), *group(ranks, 0, 3)], "")
    check(promtool, tmp_path, settings, series, {minute: False for minute in (20, 60, 110)})


def test_a_group_with_a_rank_that_never_turns_healthy_pages_after_the_partial_minutes(
    promtool, tmp_path, settings, ranks
) -> None:
    """A scale-up's group comes up with one rank short of healthy and nothing restarts it."""
    partial = [*group(ranks - 1, 40, 45), Rank(40)]
    series = side_series(
        "decode", {0: ranks, 35: 2 * ranks}, [*group(ranks, 0, 2), *partial], "stays-zero"
    )
    check(
        promtool,
        tmp_path,
        settings,
        series,
        {45 + PARTIAL_GROUP_MINUTES - 2: False, 45 + PARTIAL_GROUP_MINUTES + 3: True},
    )


def test_restarts_of_a_single_engine_side_never_page_as_a_group(
    promtool, tmp_path, settings
) -> None:
    """Prefill here runs one engine per replica: its replica restarting is not a DP group's."""
    series = side_series(
        "prefill", {0: 2}, [Rank(0, 2), Rank(0, 2, stopped=40), Rank(41, 50)], "stays-zero"
    )
    check(promtool, tmp_path, settings, series, {42: False, 48: False})


CAPTURED = Path(__file__).resolve().parents[1] / "data" / "gang_restart"
# Which pod exports each family: the Serve controller's on the head, a replica's counter on its
# worker pod (the side's role label, from the scraper's relabeling).
EXPORTED_ON = {
    SERVE_TARGET_REPLICAS.name: "head",
    SERVE_HEALTHY_REPLICAS.name: "head",
    SERVE_HEALTH_CHECK_FAILURES.stored_name: "head",
    SERVE_REPLICA_STARTS.stored_name: "decode",
}


def captured_series() -> list[dict[str, str]]:
    """The captured scrapes as promtool input, one scrape a minute: the label sets and the order
    of events are the real exporter's, the time between scrapes stretched. A series missing
    from a scrape of a target still up gets Prometheus' staleness marker."""
    scrapes = [
        {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(path.read_text())
            for sample in family.samples
        }
        for path in sorted(CAPTURED.glob("scrape-*.txt"))
    ]
    keys = sorted({key for scrape in scrapes for key in scrape})
    series = []
    for name, labels in keys:
        role = EXPORTED_ON[name]
        scraper = {"role": role, "ray_cluster": CLUSTER, "pod": f"{role}-0", "node": f"ip-{role}"}
        text = ",".join(f'{k}="{v}"' for k, v in sorted({**dict(labels), **scraper}.items()))
        values, seen = [], False
        for scrape in scrapes:
            if (name, labels) in scrape:
                values.append(f"{scrape[(name, labels)]:g}")
                seen = True
            else:
                values.append("stale" if seen and values[-1] != "stale" else "_")
        series.append({"series": f"{name}{{{text}}}", "values": " ".join(values)})
    return series


def test_the_captured_gang_restart_pages_while_the_group_is_down(promtool, tmp_path) -> None:
    """Ray 2.58's own series through a real RESTART_GANG (tests/data/gang_restart): the gang is
    down in scrapes 06-07 and whole again from 08. The gangs of two ranks were captured with a
    small MoE: DeepSeek-V3's weights do not fit two H200s, which the weights rule refuses."""
    settings = settings_for(
        "deepseek-v3-pd",
        **{
            "serving.model.id": "Qwen/Qwen3-30B-A3B",
            "serving.decode.data_parallel_size": "2",  # the captured gangs' size
            "serving.decode.eplb.num_redundant_experts": "2",
        },
    )
    series = captured_series()
    healthy = [s for s in series if s["series"].startswith(SERVE_HEALTHY_REPLICAS.name + "{")]
    assert any("0" in s["values"].split() for s in healthy)  # the stopped gang, as captured
    check(promtool, tmp_path, settings, series, {5: False, 7: True, 9: False, 21: False})


def test_the_failed_rank_query_names_the_captured_replica_that_crashed(promtool, tmp_path):
    """Of the captured gang, only the replica that exited failed a health check (its sibling
    was stopped with it and counts none); the dashboard's query names it with its pod and node."""
    series = captured_series()
    failures = [s for s in series if s["series"].startswith(SERVE_HEALTH_CHECK_FAILURES.name)]
    (failed,) = failures
    replica = re.search(r'replica="([^"]+)"', failed["series"])[1]
    query = promql.failed_ranks(SERVE_HEALTH_CHECK_FAILURES, SERVE_REPLICA_STARTS, "decode", "30m")
    labels = f'{{node="ip-decode",pod="decode-0",replica="{replica}"}}'
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {"expr": query, "eval_time": "3m", "exp_samples": []},
            {"expr": query, "eval_time": "7m", "exp_samples": [{"labels": labels, "value": 1}]},
        ],
    }
    result = run_promtool(promtool, tmp_path, {"groups": []}, [test])
    assert result.returncode == 0, result.stdout + result.stderr
