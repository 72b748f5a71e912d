"""serving.ingress: the OpenAI ingress's own replicas, rendered as the P/D builder's
``ingress_deployment_config``.

Every request passes through Ray Serve LLM's ``OpenAiIngress``, which relays decode's token
stream. Unset, Ray 2.58's defaults apply (ray/llm/_internal/serve/core/ingress/ingress.py
``DEFAULT_INGRESS_OPTIONS``: autoscaling on a target of 1e9 ongoing requests and Serve's default
``max_replicas`` of 1, ray/serve/config.py ``AutoscalingConfig``): one ingress replica, one
Python process, whatever the number of engine replicas. Set, the section's bounds and target are
deep-merged over those defaults by the builder (prefill_decode/builder.py
``maybe_apply_llm_deployment_config_defaults``, common/dict_utils.py ``deep_merge_dicts``).

The ingress's upper bound follows decode's (one source of truth): the ingress scales with the
streams decode serves, so ``max_replicas`` is decode's ``max_replicas`` and
``target_ongoing_requests`` decode's target unless this section names its own: one ingress
replica per decode replica's worth of streams.

Rendered by default (``serving.ingress`` unset means this section's defaults), because of what
`make e2e-bench --ingress` measured (docs/verification.md, "The ingress's ceiling"): one ingress
replica spends about 15 to 25 ms of CPU per 32-token stream relayed at Ray's 50 ms stream
batching, so at the one core a Python process can use it relays on the order of 50 streams a
second, the rate one engine saturates at (60 requests/s on one H200, Qwen3-8B, make gpu-bench).
One ingress for several decode replicas would be their bottleneck; with decode at one replica
(the default configuration) the rendered bounds are Ray's own: one replica.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from app_config.section import Section


class Ingress(Section):
    min_replicas: int = Field(
        1,
        ge=1,
        le=64,
        description="Ingress replicas Serve keeps at least (decode never scales to zero, so "
        "neither does the ingress).",
    )
    max_replicas: int | None = Field(
        None,
        ge=1,
        le=512,
        description="Ingress replicas at most; unset: decode's max_replicas (the ingress "
        "follows the streams decode serves).",
    )
    target_ongoing_requests: float | None = Field(
        None,
        gt=0,
        le=100000,
        description="Streams in flight per ingress replica Serve aims for before it adds one; "
        "unset: decode's target_ongoing_requests (one ingress replica per decode replica's "
        "worth of streams).",
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Ingress:
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError(
                f"serving.ingress.max_replicas {self.max_replicas} is below min_replicas "
                f"{self.min_replicas}: use max_replicas >= {self.min_replicas}, or leave it "
                "unset to follow decode's max_replicas"
            )
        return self

    def deployment_config(
        self, decode_max_replicas: int, decode_target_ongoing_requests: float
    ) -> dict[str, Any]:
        """``ingress_deployment_config``: Serve's autoscaling options for the ingress. Following
        decode, the bound is never below min_replicas."""
        upper = self.max_replicas or max(decode_max_replicas, self.min_replicas)
        return {
            "autoscaling_config": {
                "min_replicas": self.min_replicas,
                "max_replicas": upper,
                "target_ongoing_requests": self.target_ongoing_requests
                or decode_target_ongoing_requests,
            }
        }
