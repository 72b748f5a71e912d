"""serving.scaling (app_config/scaling.py) and its rules (app_config/rules/scaling.py): bad input
is a table of the configuration, the code and setting of the finding, and a fragment of what it
says."""

from __future__ import annotations

import json

import pytest

from app_config import ConfigError
from app_config.rules import evaluate, warnings
from app_config.rules.scaling import stream_batching_interval_ms
from tests.configurations import settings_for


def _objective(percentile: float, value_ms: float) -> str:
    return json.dumps({"percentile": percentile, "value_ms": value_ms})


# Both sides free to scale (default node groups: max_size 2 of 8 GPUs, one 8-GPU replica each).
WIDE = {"serving.prefill.max_replicas": "2", "serving.decode.max_replicas": "2"}
LATENCY = {
    **WIDE,
    "serving.scaling.policy": "latency",
    "serving.scaling.ttft": _objective(95, 800),
    "serving.scaling.itl": _objective(95, 60),
}

# (overrides, code, setting, fragment)
ERRORS = [
    (
        {**WIDE, "serving.scaling.policy": "latency", "serving.scaling.itl": _objective(95, 60)},
        "latency-objectives",
        "serving.scaling.ttft",
        "sizes prefill",
    ),
    (
        {**WIDE, "serving.scaling.policy": "latency", "serving.scaling.ttft": _objective(95, 800)},
        "latency-objectives",
        "serving.scaling.itl",
        "sizes decode",
    ),
    # decode's min_replicas (1) and one prefill replica, 8 GPUs each
    (
        {**LATENCY, "serving.scaling.gpu_budget": "15"},
        "gpu-budget",
        "serving.scaling.gpu_budget",
        "16",
    ),
    (
        {**LATENCY, "serving.scaling.ttft": _objective(99, 50)},
        "ttft-stream-batching",
        "serving.scaling.ttft.value_ms",
        "up to 50 ms",
    ),
    (
        {
            **LATENCY,
            "serving.stream_batching_interval_ms": "100",
            "serving.scaling.ttft": _objective(99, 80),
        },
        "ttft-stream-batching",
        "serving.scaling.ttft.value_ms",
        "up to 100 ms",
    ),
    ({"serving.scaling.ttft": _objective(40, 800)}, None, "serving.scaling.ttft.percentile", "50"),
    ({"serving.scaling.itl": _objective(95, 0)}, None, "serving.scaling.itl.value_ms", "0"),
    ({"serving.scaling.policy": "slo"}, None, "serving.scaling.policy", "latency"),
]


@pytest.mark.parametrize(("overrides", "code", "path", "fragment"), ERRORS)
def test_each_bad_scaling_setting_is_refused_naming_it(
    overrides: dict[str, str], code: str | None, path: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_for("default", **overrides)
    matching = [problem for problem in raised.value.problems if problem.path == path]
    assert matching, [str(problem) for problem in raised.value.problems]
    if code is not None:
        assert matching[0].code == code
    assert fragment in str(matching[0])


def test_the_default_is_the_queue_policy_with_no_objectives() -> None:
    scaling = settings_for("default").serving.scaling
    assert (scaling.policy, scaling.ttft, scaling.itl, scaling.gpu_budget) == (
        "queue",
        None,
        None,
        None,
    )


def test_a_latency_configuration_with_room_to_scale_raises_no_scaling_finding() -> None:
    found = evaluate(settings_for("default", **LATENCY, **{"serving.scaling.gpu_budget": "24"}))
    assert not [finding for finding in found if finding.path.startswith("serving.scaling")]


def test_a_ttft_objective_just_above_the_stream_batching_interval_is_accepted() -> None:
    settings = settings_for("default", **{**LATENCY, "serving.scaling.ttft": _objective(99, 50.5)})
    assert settings.serving.scaling.ttft.value_ms > stream_batching_interval_ms(settings)


def test_the_budget_floor_counts_whole_replicas_of_both_sides() -> None:
    """16 GPUs (decode's one replica and one prefill replica) is the smallest budget accepted."""
    settings = settings_for("default", **LATENCY, **{"serving.scaling.gpu_budget": "16"})
    assert settings.serving.scaling.gpu_budget == sum(
        settings.side(role).replica_gpus for role in ("prefill", "decode")
    )


def test_scaling_warnings_are_warnings_not_errors() -> None:
    found = warnings(
        evaluate(settings_for("default", **{"serving.scaling.itl": _objective(95, 60)}))
    )
    assert [finding.code for finding in found if finding.path.startswith("serving.scaling")] == [
        "scaling-unused"
    ]
