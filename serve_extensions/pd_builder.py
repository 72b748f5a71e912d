"""Ray Serve LLM's P/D application with servers that report their latency: the import_path that
serving_manifests/serve_config.py renders under `serving.scaling.policy: latency` (the queue
policy keeps Ray's `ray.serve.llm:build_pd_openai_app`).

Why an own builder (Ray 2.58.0, llm/_internal/serve/serving_patterns/prefill_decode/builder.py):
`build_pd_openai_app` picks the server classes itself (PDPrefillServer or DPPDPrefillServer,
PDDecodeServer or DPPDDecodeServer, by data_parallel_size) and passes them to
build_llm_deployment as `deployment_cls`, which wins over LLMConfig.server_cls
(core/server/builder.py: `deployment_cls or llm_config.server_cls or LLMServer`); its args
schema (PDServingArgs, extra="forbid") has no field for them. So this calls Ray's builder
unchanged, with Ray's own arguments, and in the application it returns swaps each side's class
for its latency-reporting subclass (latency_servers.py) with Serve's public
`Deployment.options(func_or_class=..., user_config=...)` (serve/deployment.py): name, options,
bound arguments and the graph (ingress -> decode -> prefill) stay Ray's. The one private name
used is `Application._bound_deployment` (the deployment an Application binds, which Serve's own
build_app reads): the swap replaces it in the Application object the parent deployment's
arguments already hold, so no parent is rebuilt.

The app's argument beside Ray's, taken out before Ray's builder sees it:
  latency_percentiles: {prefill: <TTFT objective percentile>, decode: <ITL objective percentile>}
It reaches each side's replicas as `user_config` (reconfigure, latency_servers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ray
from ray.serve.deployment import Application
from ray.serve.llm import build_pd_openai_app as ray_build_pd_openai_app

from serve_extensions.latency_autoscaler import PERCENTILES_ARG
from serve_extensions.latency_servers import MEASURED, PERCENTILE_KEY

SIDES = ("prefill", "decode")


def build_pd_openai_app(pd_serving_args: dict[str, Any]) -> Application:
    args = dict(pd_serving_args)
    percentiles = args.pop(PERCENTILES_ARG, None)
    if not isinstance(percentiles, dict) or set(percentiles) != set(SIDES):
        raise ValueError(
            f"{PERCENTILES_ARG} must map {' and '.join(SIDES)} to their objective's percentile "
            f"(serving.scaling.ttft / itl .percentile), got {percentiles!r}"
        )
    app = ray_build_pd_openai_app(args)
    swapped = with_latency_servers(app, percentiles)
    if sorted(swapped) != sorted(SIDES):
        known = ", ".join(cls.__name__ for cls in MEASURED)
        raise TypeError(
            f"Ray's P/D builder built servers of sides {sorted(swapped)}, not one of each of "
            f"{list(SIDES)}: {__name__} knows {known}; read Ray {ray.__version__}'s "
            "prefill_decode/builder.py for the classes it picks now"
        )
    return app


def bound_applications(app: Application) -> Iterator[Application]:
    """Every application reachable from ``app`` through its deployments' bound arguments (the
    P/D builder binds each side's server into decode's and the ingress's arguments), each once,
    its own bound ones first. Under direct streaming (RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING)
    decode is the ingress and a peer router binds it too."""
    seen: set[int] = set()

    def visit(value: Any) -> Iterator[Application]:
        if isinstance(value, Application):
            if id(value) in seen:
                return
            seen.add(id(value))
            deployment = value._bound_deployment
            for bound in (*deployment.init_args, *deployment.init_kwargs.values()):
                yield from visit(bound)
            yield value
            yield from visit(getattr(value, "_ingress_request_router", None))
        elif isinstance(value, dict):
            for item in value.values():
                yield from visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from visit(item)

    return visit(app)


def with_latency_servers(app: Application, percentiles: dict[str, float]) -> list[str]:
    """Swap, in place, every deployment of Ray's P/D server classes reachable from `app` for its
    latency-reporting subclass; the sides swapped, one entry each."""
    swapped: list[str] = []
    for application in bound_applications(app):
        deployment = application._bound_deployment
        found = MEASURED.get(deployment.func_or_class)
        if found is not None:
            side, measured = found
            application._bound_deployment = deployment.options(
                func_or_class=measured,
                user_config={PERCENTILE_KEY: float(percentiles[side])},
            )
            swapped.append(side)
    return swapped
