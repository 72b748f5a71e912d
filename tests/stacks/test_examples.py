"""The example configurations users start from (examples/*.yaml): each synthesizes as `cdk synth
-c config=<file>` reads it and passes every scanner, schema and snapshot (they are entries of
tests/configurations.py). Here: what each promises in its comments, and the On-Demand P-class
warning that points to them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from catalog.instances import CATALOG, is_p_class
from serving_manifests.serve_config import render_serve_config
from tests.configurations import EXAMPLES, PROJECT_ROOT
from tests.conftest import Synthesized

ON_DEMAND_P_CLASS = "On-Demand P-class capacity is rarely available"


def _warnings(synthesized: Synthesized) -> list[str]:
    return synthesized.gpu_node_warnings()


def test_the_default_on_demand_p5_warns_at_synth(default_app: Synthesized) -> None:
    warnings = [w for w in _warnings(default_app) if ON_DEMAND_P_CLASS in w]
    assert len(warnings) == 2  # one per side
    assert all("examples/capacity-block.yaml" in w for w in warnings)


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_example_warns_only_where_it_asks_for_on_demand_p_class(
    synthesize: Callable[[str], Synthesized], example: str
) -> None:
    synthesized = synthesize(example)
    groups = synthesized.settings.gpu_nodes.groups().values()
    expected = sum(g.capacity.type == "on_demand" and is_p_class(g.instance) for g in groups)
    assert sum(ON_DEMAND_P_CLASS in w for w in _warnings(synthesized)) == expected


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_names_only_settings_that_exist_and_changes_the_defaults(
    synthesize: Callable[[str], Synthesized], example: str
) -> None:
    """Loaded through -c config= (an unknown key would fail the synth); and each one changes
    the GPU shape or its capacity, or it would be the default again."""
    settings = synthesize(example).settings
    raw = yaml.safe_load((PROJECT_ROOT / "examples" / f"{example}.yaml").read_text())
    assert raw["gpu_nodes"]
    assert any(
        g.instance_type != "p5.48xlarge" or g.capacity.type != "on_demand"
        for g in settings.gpu_nodes.groups().values()
    )


def test_the_trial_shapes_run_on_ada_gpus_with_every_gpu_of_a_node_per_replica(
    synthesize: Callable[[str], Synthesized],
) -> None:
    for example in ("quickstart", "trial-g6e"):
        settings = synthesize(example).settings
        for role, group in settings.gpu_nodes.groups().items():
            assert group.instance.gpu_architecture == "Ada"
            assert group.capacity.type == "on_demand"
            assert settings.replica_gpus(role) == (group.instance.gpus, 1)


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_examples_engine_options_reach_both_engines(
    synthesize: Callable[[str], Synthesized], example: str
) -> None:
    settings = synthesize(example).settings
    (application,) = render_serve_config(settings)["applications"]
    for role in ("prefill", "decode"):
        kwargs = application["args"][f"{role}_config"]["engine_kwargs"]
        for key, value in {
            **settings.serving.engine_options,
            **settings.serving.engine(role).engine_options,
        }.items():
            assert kwargs[key] == value


@pytest.mark.parametrize("example", ["quickstart", "trial-g6e"])
def test_a_trial_example_states_its_efa_bandwidth(example: str) -> None:
    """Each trial file says how much slower KV moves than on P5, with the catalog's numbers."""
    text = (PROJECT_ROOT / "examples" / f"{example}.yaml").read_text()
    instance = CATALOG[yaml.safe_load(text)["gpu_nodes"]["decode"]["instance_type"]]
    assert f"{instance.efa_bandwidth_gbps} Gbps" in text
    p5 = CATALOG["p5.48xlarge"].efa_bandwidth_gbps
    assert f"{p5:,} Gbps" in text
    assert f"{p5 // instance.efa_bandwidth_gbps} times" in text


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_example_synthesizes_warning_clean_but_for_its_placeholders(
    synthesize: Callable[[str], Synthesized], example: str
) -> None:
    """What `cdk synth --strict` would fail on: every warning an example raises is acknowledged
    with a reason, except the documentation placeholders the user must replace; and each
    acknowledgment's reason is printed by the synth."""
    synthesized = synthesize(example)
    unweighed = [w for w in synthesized.warnings() if "[ack: pd-llm:" in w]
    assert unweighed
    assert all(w.endswith("[ack: pd-llm:documentation-placeholder]") for w in unweighed)
    reasons = [ack.reason for ack in synthesized.settings.acknowledged_warnings]
    printed = "\n".join(synthesized.infos())
    assert all(reason in printed for reason in reasons)
