"""The latency policy as Ray Serve 2.58's application-level autoscaling policy: a thin adapter
from Serve's AutoscalingContext per deployment to latency_policy.decide, and the decisions
exported as metrics.

Serve's side (Ray 2.58, read from the e2e venv's ray/serve):
- serveConfigV2 `applications[].autoscaling_policy: {policy_function, policy_kwargs}` (schema.py
  ServeApplicationSchema.autoscaling_policy: "This option is under development and not yet
  supported": experimental, though wired: _private/application_state.py reads it and
  _private/autoscaling_state.py ApplicationAutoscalingState runs it);
- a class as policy_function is instantiated once with policy_kwargs and called every control
  loop with {DeploymentID: AutoscalingContext} (_private/autoscaling_state.py
  _resolve_policy_callable); it returns ({DeploymentID: replicas}, {DeploymentID: state});
- Serve then applies each deployment's scaling factors and upscale/downscale delays
  (autoscaling_policy.py _apply_app_level_autoscaling_config) and clips to its bounds;
- AutoscalingContext (config.py, PublicAPI stable): current_num_replicas, target_num_replicas,
  total_num_requests, aggregated_metrics (the replicas' custom metrics, averaged over the
  look-back window per replica), config;
- the policy's class is pickled by value, the modules it imports by reference
  (config.py AutoscalingPolicy.serialize_policy): latency_policy must be importable on the head,
  where the controller runs: the serve_extensions ConfigMap is on every Ray pod's PYTHONPATH.

Latency inputs are custom autoscaling metrics that a side's replicas report: Serve calls a
deployment's `record_autoscaling_stats()` every 10 s (_private/replica.py,
RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S). LATENCY_METRIC[side] is the replica's
latency percentile in seconds, SAMPLES_METRIC how many requests it is computed from. Ray Serve
LLM's servers report neither; the app's subclasses of them do (latency_servers.py, built by
pd_builder.py). A side whose replicas report neither is scaled on its queue (latency_policy.py).
ENGINE_REQUESTS_METRIC is the requests the replica's engine holds, the side's load where reported
(latency_policy.side_load); a replica's report of it is left out when its newest point is more
than the side's look-back older than the newest of any replica of the side
(`fresh_engine_requests`): Serve's controller holds a replica's last point up to now
(_private/autoscaling_state.py _merge_and_aggregate_timeseries), so a replica that stopped
reporting would otherwise count its old load for ever. Against the side's newest point, not the
controller's clock: every report reaches the controller a push interval and a loop late, and on
the local replay's compressed 2 s look-back (0.67 s push) a loaded machine made whole sides look
stale to the clock (the fifth local run, docs/verification.md).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from serve_extensions import latency_policy
from serve_extensions.latency_policy import (
    REASONS,
    Memory,
    Objective,
    SideLimits,
    SideObservation,
    Tuning,
)

logger = logging.getLogger("ray.serve")

# The custom metrics a side's replicas report (names in record_autoscaling_stats' dict).
LATENCY_METRIC = {"prefill": "pd_llm_ttft_s", "decode": "pd_llm_itl_s"}
SAMPLES_METRIC = "pd_llm_latency_samples"
ENGINE_REQUESTS_METRIC = "pd_llm_engine_requests"
# The builder argument with each side's objective percentile, which its replicas report
# (serving_manifests/serve_config.py renders it, pd_builder.py hands it to the servers).
PERCENTILES_ARG = "latency_percentiles"
# Exported through Ray's metrics agent; Prometheus sees them with Ray's ray_ prefix
# (catalog/metrics.py SCALING_WANTED_REPLICAS, SCALING_REASON).
WANTED_METRIC = "pd_llm_scaling_wanted_replicas"
REASON_METRIC = "pd_llm_scaling_reason"
METRIC_TAGS = ("application", "deployment", "side")
# Ray Serve LLM names a side's deployment "<Prefill|Decode>:<model id>"
# (serving_patterns/prefill_decode/builder.py name_prefix, Ray 2.58).
DEPLOYMENT_PREFIX = {"prefill": "Prefill:", "decode": "Decode:"}


def side_of(deployment_name: str) -> str | None:
    for side, prefix in DEPLOYMENT_PREFIX.items():
        if deployment_name.startswith(prefix):
            return side
    return None


class LatencyObjectivePolicy:
    """Serve instantiates this once per application with the policy_kwargs that
    serving_manifests/serve_config.py renders from serving.scaling and the sides' bounds."""

    def __init__(
        self,
        objectives: dict[str, dict[str, float]],
        limits: dict[str, dict[str, Any]],
        gpu_budget: int | None = None,
        tuning: dict[str, Any] | None = None,
    ) -> None:
        self._objectives = {
            side: Objective(o["percentile"], o["value_ms"] / 1000) for side, o in objectives.items()
        }
        self._limits = {side: SideLimits(**value) for side, value in limits.items()}
        self._gpu_budget = gpu_budget
        self._tuning = Tuning(**(tuning or {}))
        self._memory = Memory()
        self._gauges: tuple[Any, Any] | None = None
        # each side's last logged (replicas, reason) and when (`_log_changes`)
        self._last: dict[str, tuple[tuple[int, str], float]] = {}

    def __call__(self, contexts: dict[Any, Any]) -> tuple[dict[Any, int], dict[Any, dict]]:
        by_side, others = {}, {}
        for deployment_id, ctx in contexts.items():
            side = side_of(ctx.deployment_name)
            if side is None:
                others[deployment_id] = ctx
            else:
                by_side[side] = (deployment_id, ctx)
        # An application-level policy replaces every deployment's own (autoscaling_state.py
        # ApplicationAutoscalingState.get_decision_num_replicas): the ingress keeps Serve's
        # queue rule through Ray's default policy (autoscaling_policy.py, PublicAPI stable).
        replicas, states = _queue_decisions(others)
        if set(by_side) != set(latency_policy.SIDES):
            # Not the P/D application this policy was rendered for: Serve's rule everywhere.
            extra, extra_states = _queue_decisions({d: c for d, c in by_side.values()})
            return {**replicas, **extra}, {**states, **extra_states}
        observations = {side: observe(side, ctx) for side, (_, ctx) in by_side.items()}
        decisions = latency_policy.decide(
            observations,
            self._limits,
            self._objectives,
            self._memory,
            self._gpu_budget,
            self._tuning,
        )
        self._export(by_side, decisions)
        self._log_changes(observations, decisions)
        for side, decision in decisions.items():
            deployment_id, ctx = by_side[side]
            replicas[deployment_id] = decision.replicas
            states[deployment_id] = dict(ctx.policy_state)
        return replicas, states

    def _export(self, by_side: dict[str, Any], decisions: dict[str, Any]) -> None:
        try:
            from ray.util import metrics
        except ImportError:  # replayed without Ray
            return
        if self._gauges is None:
            self._gauges = (
                metrics.Gauge(
                    WANTED_METRIC,
                    description="Replicas the latency policy wants for the side, before "
                    "Serve's delays.",
                    tag_keys=METRIC_TAGS,
                ),
                metrics.Gauge(
                    REASON_METRIC,
                    description="1 for the reason of the side's last latency-policy decision, "
                    "0 for the others.",
                    tag_keys=(*METRIC_TAGS, "reason"),
                ),
            )
        wanted, reason = self._gauges
        for side, decision in decisions.items():
            _, ctx = by_side[side]
            tags = {
                "application": ctx.app_name or "",
                "deployment": ctx.deployment_name,
                "side": side,
            }
            wanted.set(decision.replicas, tags=tags)
            for name in REASONS:
                reason.set(1.0 if name == decision.reason else 0.0, tags={**tags, "reason": name})
        logger.debug("latency policy: %s", decisions)

    def _log_changes(self, observations: dict[str, Any], decisions: dict[str, Any]) -> None:
        """A line in Serve's controller log when a side's wanted replicas or reason change, and
        once a look-back period while they do not, with what the policy saw and the side's floor
        (the lowest latency it has reported and its load per group then, which decides whether
        the lead trusts its line: latency_policy._slope): the metrics show the decision, the log
        keeps why (the replays read it: docs/verification.md, tools/latency_policy_log.py). The
        periodic line shows why a side did not move: the ninth local run's decode stayed at one
        replica into the turn to long answers, and lines written only at changes could not say
        which of the lead's gates held it."""
        for side, decision in decisions.items():
            seen = observations[side]
            now = (decision.replicas, decision.reason)
            last = self._last.get(side)
            if last is not None and last[0] == now and seen.now_s - last[1] < seen.look_back_s:
                continue
            self._last[side] = (now, seen.now_s)
            logger.info(
                "latency policy: %s -> %d replicas (%s), saw %s, floor %s s at %s per group",
                side,
                decision.replicas,
                decision.reason,
                seen,
                self._memory.floor_s.get(side),
                self._memory.floor_load.get(side),
            )


def _queue_decisions(contexts: dict[Any, Any]) -> tuple[dict[Any, float], dict[Any, dict]]:
    if not contexts:
        return {}, {}
    from ray.serve.autoscaling_policy import replica_queue_length_autoscaling_policy

    replicas, states = {}, {}
    for deployment_id, ctx in contexts.items():
        replicas[deployment_id], state = replica_queue_length_autoscaling_policy(ctx)
        states[deployment_id] = dict(state or {})
    return replicas, states


def observe(side: str, ctx: Any) -> SideObservation:
    """A side's observation from its AutoscalingContext: the highest latency any of its replicas
    reports (the side holds its objective only if every replica does), their samples, the
    controller's clock (Serve's control loop sets current_time; time.time() where it does not)
    and the side's look-back period; and its engines' requests, summed over the replicas whose
    report of them is fresh, with how many running replicas have reported them at all."""
    metrics = ctx.aggregated_metrics or {}
    latencies = [value for value in (metrics.get(LATENCY_METRIC[side]) or {}).values() if value]
    samples = sum((metrics.get(SAMPLES_METRIC) or {}).values())
    now = time.time() if ctx.current_time is None else ctx.current_time
    look_back = ctx.config.look_back_period_s
    reported = metrics.get(ENGINE_REQUESTS_METRIC) or {}
    engine = fresh_engine_requests(
        reported, (ctx.raw_metrics or {}).get(ENGINE_REQUESTS_METRIC) or {}, look_back
    )
    running = ctx.running_replicas
    return SideObservation(
        running_replicas=ctx.current_num_replicas,
        target_replicas=ctx.target_num_replicas,
        ongoing_requests=ctx.total_num_requests,
        latency_s=max(latencies) if latencies else None,
        samples=int(samples),
        now_s=now,
        look_back_s=look_back,
        engine_requests=sum(engine.values()) if engine else None,
        engine_replicas=len(engine),
        reporting_replicas=None if running is None else len(set(running) & set(reported)),
    )


def fresh_engine_requests(
    aggregated: dict[Any, float], raw: dict[Any, Any], look_back_s: float
) -> dict[Any, float]:
    """Each replica's engine requests (Serve's look-back average), less the replicas whose
    newest raw point is more than `look_back_s` older than the side's newest; a replica without
    raw points (a context that carries none) is kept on its average."""
    newest = {
        replica_id: max(point.timestamp for point in series)
        for replica_id, series in raw.items()
        if series
    }
    side_newest = max(newest.values(), default=0.0)
    return {
        replica_id: value
        for replica_id, value in aggregated.items()
        if newest.get(replica_id, side_newest) >= side_newest - look_back_s
    }
