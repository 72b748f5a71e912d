"""The side `pdctl plan` sizes: the configuration's side with plan's options over it, judged by
the configuration's own rules, so that plan never keeps a second copy of them (issue 29).

The options become the side's `Engine` section through pydantic (app_config/serving.py: EPLB
needs expert_parallel, redundant experts need EPLB, the ranges), and the side's GPU nodes take
the chosen instance type; then the configuration's replica-fit rule for that side runs
(app_config/model.py: a rank fits one node and TP divides its GPUs, a DP group tiles a node or
fills whole nodes, EPLB needs TP x DP > 1). What depends on the model (heads over TP, data and
expert parallel for MoE only, experts dividing over the EPLB ranks) is the model's, in
app_config/rules/model_parallel.py, which the plan command applies next. Node counts, replica
bounds and reservations are left out: plan asks whether a layout works, not whether this
deployment has room for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from app_config.errors import ConfigError, Problem, problems_from_validation_error
from app_config.rules.replica_fit import replica_fit_problems  # the configuration's rule
from app_config.serving import Engine

if TYPE_CHECKING:
    from app_config import Settings

# The replica-fit findings that are about the layout itself; the rest (max_replicas against
# max_size, node counts in whole groups) are about this deployment's node group.
LAYOUT_SETTINGS = ("tensor_parallel_size", "data_parallel_size", "eplb.enabled")


def side_with_options(
    settings: Settings,
    role: str,
    *,
    instance_type: str,
    tensor_parallel: int | None = None,
    data_parallel: int | None = None,
    expert_parallel: bool | None = None,
    eplb_redundant_experts: int | None = None,
) -> Settings:
    """The settings with serving.<role> and gpu_nodes.<role>.instance_type replaced by plan's
    options (None: the side's own); ConfigError names each setting vLLM or Ray would refuse.
    `eplb_redundant_experts` above 0 enables EPLB, as the option's help says."""
    serving = settings.serving
    section: dict[str, Any] = serving.engine(role).model_dump()
    if tensor_parallel is not None:
        section["tensor_parallel_size"] = tensor_parallel
    if data_parallel is not None:
        section["data_parallel_size"] = data_parallel
    if expert_parallel is not None:
        section["expert_parallel"] = expert_parallel
    if eplb_redundant_experts is not None:
        section["eplb"]["num_redundant_experts"] = eplb_redundant_experts
        section["eplb"]["enabled"] = section["eplb"]["enabled"] or eplb_redundant_experts > 0
    try:
        engine = Engine.model_validate(section)
    except ValidationError as error:
        raise ConfigError(
            [
                Problem(f"serving.{role}.{problem.path}", problem.message, problem.value)
                for problem in problems_from_validation_error(error, Engine)
            ]
        ) from None
    # The side's node group: its own, or the shared one (whose split stays as configured).
    name = settings.side(role).group
    group = settings.gpu_nodes.groups()[name].model_copy(update={"instance_type": instance_type})
    planned = settings.model_copy(
        update={
            "serving": serving.model_copy(update={role: engine}),
            "gpu_nodes": settings.gpu_nodes.model_copy(update={name: group}),
        }
    )
    layout = tuple(f"serving.{role}.{name}" for name in LAYOUT_SETTINGS)
    problems = [p for p in replica_fit_problems(planned, role) if p.path in layout]
    if problems:
        raise ConfigError(problems)
    return planned
