"""Ray's metrics ports as the managed scraper stores them: the synthesized scrape configuration's
discovery, relabeling and keep rule (scraper.py) on the running application's series, against
what the catalog lists and what the synthesized dashboard and alert rules query."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable

import openai
from harness import METRICS_REPORT_INTERVAL_MS, LocalRay, wait_for
from prometheus_client.parser import text_string_to_metric_families
from scraper import Series, discover, scrape, target_labels

from catalog.metrics import (
    AUTOSCALER_ACTIVE_NODES,
    AUTOSCALER_PENDING_NODES,
    DEPLOYMENT_PREFIX,
    GENERATED_BY_SCRAPER,
    INTER_TOKEN_LATENCY,
    NIXL_FAILED_TRANSFERS,
    NIXL_TRANSFER_TIME,
    REQUESTS_RUNNING,
    ROLE_LABEL,
    SCRAPED,
    SCRAPED_FOR_DATA_PARALLEL,
    SCRAPED_FOR_PREFIX_ROUTING,
    SERVE_HEALTHY_REPLICAS,
    SERVE_TARGET_REPLICAS,
    TTFT,
    PrometheusMetric,
)

SIDES = ("prefill", "decode")
# Series a side never has, by how vLLM runs P/D: prefill generates one token per request (no
# inter-token gap), and with NIXL's pull the transfer is decode's READ, timed and counted there.
# The Serve controller's series come from the head, labelled with the deployment (its name says
# the side); Ray's autoscaler runs only under KubeRay (the head's sidecar, a job of its own).
ON_HEAD = (SERVE_TARGET_REPLICAS, SERVE_HEALTHY_REPLICAS)
NOT_LOCAL = (AUTOSCALER_PENDING_NODES, AUTOSCALER_ACTIVE_NODES)
NOT_ON_SIDE: dict[str, tuple[PrometheusMetric, ...]] = {
    "prefill": (
        INTER_TOKEN_LATENCY,
        NIXL_TRANSFER_TIME,
        NIXL_FAILED_TRANSFERS,
        *ON_HEAD,
        *NOT_LOCAL,
    ),
    "decode": (*ON_HEAD, *NOT_LOCAL),
}
RAY_JOB = "ray"  # monitoring/scrape_config.py JOB_NAME: the Ray pods' metrics ports


def ray_job(pd: LocalRay) -> dict:
    (job,) = [j for j in pd.synthesized.scrape_config["scrape_configs"] if j["job_name"] == RAY_JOB]
    return job


REPORT_INTERVAL_S = METRICS_REPORT_INTERVAL_MS / 1000


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def scrape_everything(pd: LocalRay) -> list[Series]:
    """One scrape of every target the synthesized scrape configuration keeps."""
    job = ray_job(pd)
    (discovery,) = job["kubernetes_sd_configs"]
    stored: list[Series] = []
    for pod in pd.pods():
        if pod.namespace not in discovery["namespaces"]["names"]:
            continue
        for discovered in discover(pod, job["job_name"]):
            target = target_labels(discovered, job)
            if target is not None:
                stored += scrape(target, job, pd.pod_fetch)
    return stored


def by_side(stored: Iterable[Series]) -> set[tuple[str, str]]:
    return {(series.name, series.labels.get(ROLE_LABEL, "")) for series in stored}


def queried_by_side(text: str) -> set[tuple[str, str]]:
    """(series, side) for every selector with a role matcher in the dashboard and alert rules."""
    pairs = set()
    for name, matchers in re.findall(r"([a-zA-Z_][a-zA-Z0-9_:]*)\{([^}]*)\}", text):
        for side in re.findall(rf'{ROLE_LABEL}\s*=\s*\\?"(\w+)', matchers):
            pairs.add((name, side))
    return pairs


def test_one_target_per_pod_labelled_with_its_side(pd: LocalRay) -> None:
    job = ray_job(pd)
    targets = [
        target
        for pod in pd.pods()
        for discovered in discover(pod, job["job_name"])
        if (target := target_labels(discovered, job)) is not None
    ]
    assert sorted(t[ROLE_LABEL] for t in targets) == sorted(["head", *SIDES])
    for target in targets:
        assert target["pod"].startswith(pd.ray_cluster_name)
        assert target["ray_cluster"] == pd.ray_cluster_name
        assert target["__address__"].endswith(":8080")


def test_every_scraped_series_is_stored_with_its_side(
    pd: LocalRay, client: openai.OpenAI, model: str, figures: dict
) -> None:
    """After traffic (one transfer failing, so the failure counter exists), each side has the
    catalog's series that side produces, labelled with it; nothing outside the catalog is kept."""
    client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "warm"}], max_tokens=4, stream=True
    )
    # A prompt of whole KV blocks, twice: both sides' engines count prefix-cache hits (a
    # counter's series exists from its first non-zero count).
    block_size = pd.synthesized.serve_config["applications"][0]["args"]["prefill_config"][
        "engine_kwargs"
    ]["block_size"]
    repeated = f"repeat {uuid.uuid4().hex} " + " ".join(["word"] * 3 * block_size)
    for _ in range(2):
        client.completions.create(model=model, prompt=repeated, max_tokens=2)
    with pd.transfers_failing():
        client.completions.create(model=model, prompt="fail one transfer", max_tokens=2)
    wanted = {
        (name, side)
        for side in SIDES
        for metric in SCRAPED
        if metric not in NOT_ON_SIDE[side]
        for name in metric.queried_names()
    } | {(metric.name, side) for metric in GENERATED_BY_SCRAPER for side in SIDES}

    # The head's Serve controller series, one per side's deployment, stored with role=head: in
    # any scrape of the wait. Ray 2.58's controller re-sets an unchanged replica health gauge at
    # most every RAY_SERVE_STATUS_GAUGE_REPORT_INTERVAL_S (10 s: deployment_state.py
    # _set_health_gauge), and the export drops a gauge two report intervals after its last set,
    # so one replica's series is exported for part of each 10 s, not at every scrape.
    on_head_wanted = {(m.name, prefix) for m in ON_HEAD for prefix in DEPLOYMENT_PREFIX.values()}
    on_head_stored: set[tuple[str, str]] = set()

    def complete() -> list[Series] | None:
        # Gauges live two report intervals after they were last set: set them just before.
        client.completions.create(model=model, prompt="gauges", max_tokens=3)
        messages = [{"role": "user", "content": "gauges"}]
        list(client.chat.completions.create(model=model, messages=messages, stream=True))
        time.sleep(REPORT_INTERVAL_S + 0.5)
        stored = scrape_everything(pd)
        on_head_stored.update(
            (series.name, prefix)
            for series in stored
            if series.labels.get(ROLE_LABEL) == "head"
            for prefix in DEPLOYMENT_PREFIX.values()
            if series.labels.get("deployment", "").startswith(prefix)
        )
        done = wanted <= by_side(stored) and on_head_wanted <= on_head_stored
        return stored if done else None

    stored = wait_for(complete, 90, 0.5, "every catalog series on its side")
    # A side with DP groups also keeps the replica start counter (SCRAPED_FOR_DATA_PARALLEL),
    # one routed by the app's prefix-aware router its counters (SCRAPED_FOR_PREFIX_ROUTING).
    kept = (*SCRAPED, *SCRAPED_FOR_DATA_PARALLEL, *SCRAPED_FOR_PREFIX_ROUTING)
    kept_names = {name for metric in kept for name in metric.queried_names()}
    assert {series.name for series in stored} <= kept_names | {"up"}
    assert on_head_wanted <= on_head_stored, on_head_wanted - on_head_stored
    produced = by_side(stored)
    # What the synthesized dashboard and alert rules read that no running side ever has: the
    # prefill panels of NIXL transfer time and inter-token latency (see NOT_ON_SIDE).
    without_data = queried_by_side(pd.synthesized.queries) - produced
    figures["queried_but_never_produced"] = sorted(f"{n}{{role={s}}}" for n, s in without_data)
    assert without_data <= {
        (name, side)
        for side, metrics in NOT_ON_SIDE.items()
        for metric in metrics
        for name in metric.queried_names()
    }


def test_nixl_counters_on_decode_only(pd: LocalRay, client: openai.OpenAI, model: str) -> None:
    marker = uuid.uuid4().hex
    client.completions.create(model=model, prompt=f"transfer {marker}", max_tokens=2)
    transferred = [
        r
        for r in pd.records()
        if r["event"] == "request" and r["phase"] == "decode" and r["transfer_failed"] is False
    ]
    count = f"{NIXL_TRANSFER_TIME.name}_count"

    def all_counted() -> list | None:
        found = samples(pd.metrics_text("decode"), count)
        return found if sum(value for _, value in found) >= len(transferred) else None

    (labels, _), *_ = wait_for(all_counted, 60, 1, f"{count} >= {len(transferred)} on decode")
    assert labels["model_name"] == model
    assert labels["engine"] == "0"
    assert "ReplicaId" in labels
    assert not samples(pd.metrics_text("prefill"), count)

    def failed_total() -> float:
        return sum(
            v for _, v in samples(pd.metrics_text("decode"), NIXL_FAILED_TRANSFERS.stored_name)
        )

    before = failed_total()
    with pd.transfers_failing():
        client.completions.create(model=model, prompt=f"fail {marker}", max_tokens=2)
    wait_for(lambda: failed_total() == before + 1, 60, 1, "one more failed transfer counted")
    # Ray's OpenTelemetry export: a counter only under its _total name (the catalog reads that).
    text = pd.metrics_text("decode")
    assert samples(text, NIXL_FAILED_TRANSFERS.stored_name)
    assert not [
        line for line in text.splitlines() if line.startswith(NIXL_FAILED_TRANSFERS.name + "{")
    ]


def test_idle_gauges_vanish_histograms_stay(
    pd: LocalRay, client: openai.OpenAI, model: str
) -> None:
    """Ray 2.58's OpenTelemetry recorder drops a gauge not set for two report intervals
    (ray/_private/telemetry/open_telemetry_metric_recorder.py): an idle engine has no
    running/waiting series at all, not zeros."""
    client.completions.create(model=model, prompt="last request", max_tokens=2)
    wait_for(lambda: samples(pd.metrics_text("decode"), REQUESTS_RUNNING.name), 30, 0.5, "a gauge")

    def idle() -> str | None:
        text = pd.metrics_text("decode")
        return None if samples(text, REQUESTS_RUNNING.name) else text

    # Gone within two report intervals and the next export (bounded with room to spare), and
    # the histograms, last set with it, still there.
    text = wait_for(idle, 4 * REPORT_INTERVAL_S + 2, 0.5, "the idle gauge dropped")
    assert samples(text, f"{TTFT.name}_count")
    assert samples(text, f"{NIXL_TRANSFER_TIME.name}_count")


def test_the_autoscaler_job_targets_the_heads_sidecar_port(pd: LocalRay) -> None:
    """Ray's autoscaler does not run in the local cluster, so its series are not scraped here;
    what can be checked is that the job finds exactly the head pod, at the port Ray's autoscaler
    listens on in this Ray (its own constant, not ours)."""
    from ray.autoscaler._private.constants import AUTOSCALER_METRIC_PORT

    (job,) = [j for j in pd.synthesized.scrape_config["scrape_configs"] if j["job_name"] != RAY_JOB]
    targets = [
        target
        for pod in pd.pods()
        for discovered in discover(pod, job["job_name"])
        if (target := target_labels(discovered, job)) is not None
    ]
    assert [t[ROLE_LABEL] for t in targets] == ["head"]
    (head,) = [pod for pod in pd.pods() if pod.labels.get("ray.io/node-type") == "head"]
    assert targets[0]["__address__"] == f"{head.ip}:{AUTOSCALER_METRIC_PORT}"
