"""Builds one Serve application's args twice, with Ray Serve LLM's P/D builder and with the app's
(serve_extensions/pd_builder.py), and prints what each bound, deployment by deployment, as JSON
(in a process of its own: Ray's builder imports and starts Ray, which the test session must not;
test_pd_builder.py reads the output):

    python tests/e2e/pd_builder_probe.py ARGS.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def deployments(app: Any) -> dict[str, dict[str, Any]]:
    """Every deployment reachable from the application through bound arguments, by name."""
    from ray.serve.deployment import Application

    found: dict[str, dict[str, Any]] = {}

    def visit(value: Any) -> None:
        if isinstance(value, Application):
            deployment = value._bound_deployment
            config = deployment._deployment_config
            found[deployment.name] = {
                "class": deployment.func_or_class.__name__,
                "bases": [base.__name__ for base in deployment.func_or_class.__mro__],
                "user_config": deployment.user_config,
                "init_kwargs": sorted(deployment.init_kwargs),
                "options": json.loads(
                    config.model_dump_json(exclude={"user_config", "user_configured_option_names"})
                ),
                "ray_actor_options": deployment.ray_actor_options,
            }
            for bound in (*deployment.init_args, *deployment.init_kwargs.values()):
                visit(bound)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    visit(app)
    return found


def main(path: str) -> int:
    from ray.serve.llm import build_pd_openai_app

    from serve_extensions import pd_builder
    from serve_extensions.latency_autoscaler import PERCENTILES_ARG

    args = json.loads(Path(path).read_text())
    ray_args = {key: value for key, value in args.items() if key != PERCENTILES_ARG}
    result = {
        "ray": deployments(build_pd_openai_app(ray_args)),
        "app": deployments(pd_builder.build_pd_openai_app(args)),
    }
    try:
        pd_builder.build_pd_openai_app(ray_args)
        result["without_percentiles"] = None
    except ValueError as problem:
        result["without_percentiles"] = str(problem)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
