"""Behaviour over time, measured: replicas killed and Serve-config changes applied while clients
poll and stream (traffic.py). The figures go to figures.json for docs/verification.md's reliability
section; the tests assert only what must hold on any machine: the application is RUNNING again
within a bound, Serve started the replica it had to, and requests succeed afterwards.

Named to run last: its config changes and restarts stay in effect for the session.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from harness import LocalRay, localize, wait_for
from traffic import Load, StatusLog, measure

RECOVERY_BOUND_S = 300.0
SETTLE_S = 3.0  # load kept on after recovery, so the figures include the first seconds back


@pytest.fixture
def load(pd: LocalRay, model: str) -> Iterator[Load]:
    traffic = Load(pd.base_url, model)
    traffic.start()
    try:
        time.sleep(3.0)  # streams in flight and a baseline of served probes
        yield traffic
    finally:
        traffic.stop()


def engine_starts(pd: LocalRay, role: str) -> list[dict[str, Any]]:
    return [r for r in pd.records() if r["event"] == "start" and r["role"] == role]


def disrupt(
    pd: LocalRay, load: Load, action: Callable[[], None], restarts: tuple[str, ...]
) -> dict[str, Any]:
    """Run ``action`` under load; wait until each side in ``restarts`` has started a new engine,
    the application is RUNNING and a request succeeds; the clients' view, measured."""
    before = {role: len(engine_starts(pd, role)) for role in ("prefill", "decode")}
    status = StatusLog(lambda: pd.applications()[pd.app_name]["status"])
    with status.running():
        event = time.monotonic()
        action()
        wait_for(
            lambda: all(len(engine_starts(pd, role)) > before[role] for role in restarts),
            RECOVERY_BOUND_S,
            0.5,
            f"a new engine on {restarts}",
        )
        pd.wait_status(pd.app_name, "RUNNING", RECOVERY_BOUND_S, failures=("DEPLOY_FAILED",))
        time.sleep(SETTLE_S)
        outcomes = load.stop()
    figures = measure(outcomes, event, status.seen)
    figures["engines_restarted"] = {
        role: len(engine_starts(pd, role)) - before[role] for role in ("prefill", "decode")
    }
    last = [o for o in outcomes if o.kind == "probe" and o.start > time.monotonic() - SETTLE_S]
    assert last, "no probe in the last seconds"
    assert all(o.ok for o in last), [o.error for o in last if not o.ok]
    return figures


def kill_replica(pd: LocalRay, role: str) -> Callable[[], None]:
    def action() -> None:
        import ray
        from ray.util.state import list_actors

        prefix = "Prefill:" if role == "prefill" else "Decode:"
        (replica,) = [
            actor
            for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
            if actor.class_name.startswith("ServeReplica:")
            and actor.class_name.split(":", 2)[2].startswith(prefix)
        ]
        ray.kill(ray.get_actor(replica.name, namespace="serve"), no_restart=True)

    return action


@pytest.mark.parametrize("role", ["decode", "prefill"])
def test_a_killed_replica_is_replaced(
    pd: LocalRay, load: Load, role: str, figures: dict[str, Any]
) -> None:
    measured = disrupt(pd, load, kill_replica(pd, role), restarts=(role,))
    figures.setdefault("under_load", {})[f"{role} replica killed"] = measured
    assert measured["engines_restarted"][role] == 1


def change(pd: LocalRay, edit: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    def action() -> None:
        config = copy.deepcopy(pd.config)
        edit(config["applications"][0]["args"])
        pd.put(config)
        pd.config = config

    return action


def test_an_autoscaling_bound_change(pd: LocalRay, load: Load, figures: dict[str, Any]) -> None:
    """`serving.decode.max_replicas`, which the README once listed as applied in place. In the
    serveConfigV2 it is inside the application's args, and Serve's code version of an
    application hashes its args (ray/serve/_private/deploy_utils.py, get_app_code_version):
    every replica of the application is replaced."""

    def raise_bound(args: dict[str, Any]) -> None:
        args["decode_config"]["deployment_config"]["autoscaling_config"]["max_replicas"] += 1

    measured = disrupt(pd, load, change(pd, raise_bound), restarts=("prefill", "decode"))
    figures.setdefault("under_load", {})["decode max_replicas raised"] = measured
    assert measured["engines_restarted"] == {"prefill": 1, "decode": 1}


def test_an_engine_change_applied_in_place(
    pd: LocalRay, load: Load, figures: dict[str, Any]
) -> None:
    """What `upgrade_strategy: None` does with an engine change: Serve replaces the engines on
    the running cluster (with NewCluster, KubeRay starts a second cluster instead). A change to
    one side's engine replaces both sides' (the args are the application's code version)."""

    def lower_memory(args: dict[str, Any]) -> None:
        args["decode_config"]["engine_kwargs"]["gpu_memory_utilization"] -= 0.05

    measured = disrupt(pd, load, change(pd, lower_memory), restarts=("prefill", "decode"))
    figures.setdefault("under_load", {})["decode gpu_memory_utilization changed"] = measured
    wanted = pd.config["applications"][0]["args"]["decode_config"]["engine_kwargs"]
    latest = engine_starts(pd, "decode")[-1]["engine_kwargs"]
    assert latest["gpu_memory_utilization"] == wanted["gpu_memory_utilization"]


# ---- Per-side scaling and cache-aware routing, on variants of the synthesized application. Each
# variant replaces the running application (deleted first: its engines hold the GPUs the
# variant's need), so these run last.

SCALE_BOUND_S = 120.0


def redeploy(pd: LocalRay, edit: Callable[[dict[str, Any]], None]) -> None:
    """The synthesized application with ``edit`` applied (to the synthesized config, not to
    what an earlier test left running: each edit is a variant of what `cdk synth` wrote), in
    place of the running one. When the running application is already that variant and
    RUNNING (an earlier test deployed it), it is kept: deleting and deploying it again would
    only start the same replicas anew."""
    config = localize(pd.synthesized.serve_config, pd.http_port)
    edit(config["applications"][0]["args"])
    running = pd.applications().get(pd.app_name, {}).get("status") == "RUNNING"
    if config == pd.config and running:
        return
    pd.put({**config, "applications": []})
    wait_for(lambda: not pd.applications(), RECOVERY_BOUND_S, 1.0, "the application deleted")
    pd.deploy(config)
    pd.config = config


def two_replicas_per_node(args: dict[str, Any]) -> None:
    """TP halved on both sides, so that each side's one node holds two replicas."""
    for side in ("prefill_config", "decode_config"):
        args[side]["engine_kwargs"]["tensor_parallel_size"] //= 2


def scaling_between_one_and_two(args: dict[str, Any]) -> None:
    """The rendered autoscaling per side, with room to grow and a short measuring window (Serve
    averages over look_back_period_s, 30 s by default) so that the test takes seconds; a short
    downscale delay (the rendered 300 and 600 s) brings the side one load raised back to one
    replica within seconds, so that the next load starts from one on both sides on this same
    deployment (redeploy keeps it). The rendered TP is kept: each side's one node holds one
    replica, so the second replica Serve's target asks for waits for a node, as on EKS until
    the autoscaler adds one (the test reads the target; a replica that started would only be
    stopped again, a vLLM import each)."""
    for side in ("prefill_config", "decode_config"):
        args[side]["deployment_config"]["autoscaling_config"].update(
            min_replicas=1,
            max_replicas=2,
            upscale_delay_s=1,
            downscale_delay_s=1,
            look_back_period_s=5,
        )


def serve_gauge(pd: LocalRay, name: str) -> dict[str, float]:
    """A gauge Serve's controller exports per deployment, by side, read where the scraper reads
    it: the head's metrics port."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(pd.metrics_text("head")):
        for sample in family.samples:
            side, colon, _ = sample.labels.get("deployment", "").partition(":")
            if sample.name == name and colon:
                values[side.lower()] = sample.value  # Prefill:<model>, Decode:<model>
    return values


def target_replicas(pd: LocalRay) -> dict[str, float]:
    """Serve's target per side."""
    return serve_gauge(pd, "ray_serve_autoscaling_target_replicas")


def serve_input(pd: LocalRay) -> dict[str, float]:
    """What Serve's autoscaler decided each side on: the requests in flight it averaged over
    the look-back window (Ray 2.58 serve/_private/autoscaling_state.py,
    serve_autoscaling_total_requests, "the input to the autoscaling decision")."""
    return serve_gauge(pd, "ray_serve_autoscaling_total_requests")


def one_request_s(pd: LocalRay, model: str, prompt: str, max_tokens: int) -> float:
    """How long one request of the load takes on this machine now, measured."""
    import openai

    api = openai.OpenAI(base_url=f"{pd.base_url}/v1", api_key="x", max_retries=0, timeout=60)
    start = time.monotonic()
    api.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens
    )
    return time.monotonic() - start


def run_load(pd: LocalRay, model: str, prompt: str, max_tokens: int, clients: int, spread_s: float):
    """``clients`` threads sending one request after another until the returned event is set,
    their first requests spread evenly over ``spread_s``: started together, they would send
    their prefill calls together, and again each time their equal answers end together."""
    import threading

    import openai

    stop = threading.Event()

    def client(delay_s: float) -> None:
        api = openai.OpenAI(base_url=f"{pd.base_url}/v1", api_key="x", max_retries=0, timeout=60)
        if stop.wait(delay_s):
            return
        while not stop.is_set():
            api.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens
            )

    threads = [
        threading.Thread(target=client, args=(i * spread_s / clients,), daemon=True)
        for i in range(clients)
    ]
    for thread in threads:
        thread.start()
    return stop, threads


@pytest.mark.parametrize(
    ("loaded", "prompt_words", "max_tokens", "clients"),
    [
        # Long prompts, one output token: prefill is busy, decode only waits on it.
        ("prefill", 3000, 1, 6),
        # Short prompts, long answers: decode is busy; prefill's part of each request is the
        # local cluster's routing of the prefill call decode's server makes for it, so prefill's
        # requests in flight are the clients times the share of each request spent in that call.
        # The clients' first requests are spread over one request's time (measured), so that
        # those calls do not arrive together: started at once, the 40 clients' equal answers
        # ended together and their prefill calls came in waves of 40; on a loaded two-core
        # machine a wave lasted long enough that Serve's 5 s average of prefill's requests in
        # flight passed its target of 4, and prefill's target went to 2.
        ("decode", 3, 1000, 40),
    ],
)
def test_load_on_one_side_raises_only_that_sides_replicas(
    pd: LocalRay, model: str, loaded: str, prompt_words: int, max_tokens: int, clients: int
) -> None:
    """Each side's own target (the rendered defaults: prefill 4, decode 32 requests in flight
    per replica) decides; the other side's replica count stays at one."""
    redeploy(pd, scaling_between_one_and_two)
    both_at_one = {"prefill": 1, "decode": 1}
    wait_for(lambda: target_replicas(pd) == both_at_one, SCALE_BOUND_S, 1.0, "targets of 1")
    prompt = " ".join(["word"] * prompt_words)
    spread_s = one_request_s(pd, model, prompt, max_tokens)
    stop, threads = run_load(pd, model, prompt, max_tokens, clients, spread_s)
    other = "decode" if loaded == "prefill" else "prefill"
    inputs = []
    try:
        wait_for(lambda: target_replicas(pd).get(loaded) == 2, SCALE_BOUND_S, 1.0, "scale-up")
        for _ in range(10):  # the other side had the same time to react
            time.sleep(1)
            inputs.append(serve_input(pd))
        # Still exported at steady state (Ray drops a gauge nobody re-sets within two report
        # intervals; Serve re-sets this one), and still one. Serve's inputs go in the message.
        assert target_replicas(pd)[other] == 1, {"spread_s": spread_s, "serve_input": inputs}
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=90)


def rendered_prefill_router(pd: LocalRay) -> dict[str, Any]:
    """The request_router_config the synthesized Serve config gives prefill (its default: the
    app's PrefixAffinityRouter, imported from the serve_extensions ConfigMap)."""
    args = pd.synthesized.serve_config["applications"][0]["args"]
    return copy.deepcopy(args["prefill_config"]["deployment_config"]["request_router_config"])


def two_prefill_replicas(router: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(args: dict[str, Any]) -> None:
        two_replicas_per_node(args)
        deployment = args["prefill_config"]["deployment_config"]
        deployment["autoscaling_config"].update(min_replicas=2, max_replicas=2)
        deployment["request_router_config"] = router

    return edit


def test_requests_sharing_a_prefix_reach_the_same_prefill_replica(pd: LocalRay, model: str) -> None:
    """The rendered prefill router: two prefill replicas; two families of prompts, each sharing
    a long prefix, sent one after the other: each family stays on one replica."""
    import openai

    rendered = rendered_prefill_router(pd)
    assert rendered["request_router_class"].startswith("serve_extensions."), rendered
    redeploy(pd, two_prefill_replicas(rendered))
    client = openai.OpenAI(base_url=f"{pd.base_url}/v1", api_key="x", max_retries=0, timeout=120)
    families = {name: " ".join([f"{name}-context"] * 200) for name in ("alpha", "beta")}
    seen = len(pd.records())
    for question in range(6):
        for prefix in families.values():
            client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": f"{prefix} question {question}"}],
                max_tokens=4,
            )
    prefills = [
        r for r in pd.records()[seen:] if r["event"] == "request" and r["role"] == "prefill"
    ]
    assert len(prefills) == 12
    for name in families:
        replicas = {r["replica"] for r in prefills if f"{name}-context" in r["prompt"]}
        assert len(replicas) == 1, (name, replicas)


# Ray Serve LLM 2.58's own prefix router, which the configuration refuses (app_config/serving.py)
# and this test shows losing requests under concurrency (docs/operating.md, "Cache-aware
# routing"); rendered as the project used to render it.
RAY_PREFIX_ROUTER = {
    "request_router_class": "ray.serve.llm.request_router:PrefixCacheAffinityRouter",
    "request_router_kwargs": {"do_eviction": True},
}
CONCURRENCY = (4, 16, 64)
REQUESTS_PER_CLIENT = 2
ROUTED_WITHIN_S = 30.0  # a client's bound on one request; the app's router needs about 1 s
NOT_SENT = "not sent"  # a request of a load in which an earlier one went unanswered
FULFILLMENT = "ray_serve_request_router_fulfillment_time_ms"


Histogram = dict[tuple[tuple[str, str], ...], tuple[float, dict[float, float]]]


def fulfillment_histogram(pd: LocalRay, deployment_prefix: str) -> Histogram:
    """Serve's own record of how long each request waited in the decode replica's router for a
    prefill replica (request_router.py _record_queue_wait_time), per series: (count, cumulative
    buckets) by the series' labels other than ``le``."""
    from prometheus_client.parser import text_string_to_metric_families

    series: Histogram = {}
    for family in text_string_to_metric_families(pd.metrics_text("decode")):
        for sample in family.samples:
            if not sample.labels.get("deployment", "").startswith(deployment_prefix):
                continue
            key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            count, buckets = series.get(key, (0.0, {}))
            if sample.name == f"{FULFILLMENT}_count":
                count += sample.value
            elif sample.name == f"{FULFILLMENT}_bucket":
                buckets[float(sample.labels["le"])] = sample.value
            series[key] = (count, buckets)
    return series


def counted_since(before: Histogram, after: Histogram) -> tuple[float, dict[float, float]]:
    """What was recorded between two reads, summed over series. A series of a replica that a
    redeploy replaced may still be exported for a while and then vanish, and a new replica's
    series start at zero: only a series' own growth counts (a drop is a restart, counted from 0)."""
    total, buckets = 0.0, {}
    for key, (count, bounds) in after.items():
        base_count, base_bounds = before.get(key, (0.0, {}))
        if count < base_count:
            base_count, base_bounds = 0.0, {}
        total += count - base_count
        for bound, value in bounds.items():
            buckets[bound] = buckets.get(bound, 0.0) + value - base_bounds.get(bound, 0.0)
    return total, buckets


@pytest.mark.parametrize(
    "router",
    [
        pytest.param("rendered", id="app-prefix-router"),
        pytest.param(
            "ray",
            id="ray-prefix-cache-affinity-router",
            marks=pytest.mark.xfail(
                strict=True,
                reason="Ray 2.58's PrefixCacheAffinityRouter has no FIFOMixin: a request a "
                "routing task left is never routed, the others spin (docs/operating.md)",
            ),
        ),
    ],
)
def test_cache_aware_routing_holds_under_concurrency(
    pd: LocalRay, model: str, router: str, figures: dict[str, Any]
) -> None:
    """Two prefill replicas and a cache-aware router; 4, 16, then 64 clients at once, each
    sending prompts of a few shared-prefix families: every request is answered, and none waited
    on routing (Serve's fulfilment histogram, in the decode replica that routes prefill) longer
    than the queue-length probes' longest deadline, read from Ray's source."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import openai
    from ray.serve._private.constants import RAY_SERVE_MAX_QUEUE_LENGTH_RESPONSE_DEADLINE_S

    deadline_ms = RAY_SERVE_MAX_QUEUE_LENGTH_RESPONSE_DEADLINE_S * 1000
    config = rendered_prefill_router(pd) if router == "rendered" else RAY_PREFIX_ROUTER
    redeploy(pd, two_prefill_replicas(config))
    families = [" ".join([f"family{i}-context"] * 150) for i in range(4)]
    local = threading.local()

    unanswered = threading.Event()  # set by a request of this load not answered in time

    def one(index: int) -> float | str | None:
        """The request's latency, None when it was not answered within the bound, NOT_SENT
        when one before it was not: that load has failed, and the others need not wait out
        their bound too."""
        if unanswered.is_set():
            return NOT_SENT
        if not hasattr(local, "client"):
            local.client = openai.OpenAI(
                base_url=f"{pd.base_url}/v1", api_key="x", max_retries=0, timeout=ROUTED_WITHIN_S
            )
        start = time.monotonic()
        try:
            local.client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": f"{families[index % 4]} question {index}"}],
                max_tokens=2,
            )
        except openai.APITimeoutError:
            unanswered.set()
            return None
        return time.monotonic() - start

    measured: dict[str, Any] = {}
    figures.setdefault("cache_aware_routing", {})[router] = measured
    blocks_before = router_blocks(pd)
    for clients in CONCURRENCY:
        before = fulfillment_histogram(pd, "Prefill:")
        total = clients * REQUESTS_PER_CLIENT
        unanswered.clear()
        with ThreadPoolExecutor(clients) as pool:
            sent = [t for t in pool.map(one, range(total)) if t != NOT_SENT]
        answered = sorted(t for t in sent if isinstance(t, float))
        figure: dict[str, Any] = {
            "requests": total,
            "unanswered": len(sent) - len(answered),
            "not_sent": total - len(sent),
        }
        measured[str(clients)] = figure
        if answered:
            figure.update(
                client_p50_s=round(answered[len(answered) // 2], 2),
                client_max_s=round(answered[-1], 2),
            )
        assert len(answered) == total, measured

        # Ray exports every METRICS_REPORT_INTERVAL_MS: wait until all are counted.
        last: dict[str, float] = {}

        def all_counted(
            before: Histogram = before, total: int = total, last: dict[str, float] = last
        ) -> tuple[float, dict[float, float]] | None:
            counted = counted_since(before, fulfillment_histogram(pd, "Prefill:"))
            last["counted"] = counted[0]
            return counted if counted[0] >= total else None

        try:
            count, buckets = wait_for(
                all_counted, 60.0, 0.5, "every routed request in Serve's fulfilment histogram"
            )
        except TimeoutError as missing:
            # The histogram is the decode replica's, exported by its node: a variant that put
            # decode on another node (TP halved to 0 by compounding edits did) shows no growth.
            raise AssertionError(
                f"{last.get('counted', 0):.0f} of {total} routed requests counted; {measured}"
            ) from missing
        slow = count - buckets[deadline_ms]
        figure[f"routing_waits_over_{deadline_ms:.0f}_ms"] = slow
        figure["routing_waits_over_100_ms"] = count - buckets[100.0]
        assert slow == 0, measured
    if router == "rendered":
        # The dashboard's hit rate, as the decode pod (which routes prefill) exports it: the
        # families repeat, so most of their blocks were already on the chosen replica.
        blocks = blocks_since(blocks_before, router_blocks(pd))
        figures["cache_aware_routing"]["predicted_hit_rate"] = round(
            blocks["matched"] / blocks["prompt"], 3
        )
        assert blocks["matched"] > 0.5 * blocks["prompt"], blocks


Counters = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def router_blocks(pd: LocalRay) -> Counters:
    """The app's router's counters for prefill (catalog/metrics.py ROUTER_*_BLOCKS), per series:
    ("prompt" or "matched", the series' labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    from catalog.metrics import ROUTER_MATCHED_BLOCKS, ROUTER_PROMPT_BLOCKS

    names = {
        ROUTER_PROMPT_BLOCKS.stored_name: "prompt",
        ROUTER_MATCHED_BLOCKS.stored_name: "matched",
    }
    found: Counters = {}
    for family in text_string_to_metric_families(pd.metrics_text("decode")):
        for sample in family.samples:
            if sample.name in names and sample.labels.get("deployment", "").startswith("Prefill:"):
                found[(names[sample.name], tuple(sorted(sample.labels.items())))] = sample.value
    return found


def blocks_since(before: Counters, after: Counters) -> dict[str, float]:
    """What the router counted between two reads, as counted_since: a series' own growth (a
    series that restarted counts from 0; one that vanished, nothing)."""
    grown = {"prompt": 0.0, "matched": 0.0}
    for key, value in after.items():
        base = before.get(key, 0.0)
        grown[key[0]] += value - (base if value >= base else 0.0)
    return grown
