"""Ray Serve's build step on what the project renders, in one process for the whole session
(Ray's builder imports and starts Ray, which the test session must not; one Ray start for all of
them, not one per application; test_pd_builder.py reads the output):

- each P/D application's args of ``pd`` built twice, with Ray Serve LLM's P/D builder and with
  the app's (serve_extensions/pd_builder.py): what each bound, deployment by deployment;
- each whole application of ``serve_build`` (a Serve config's entry) through Ray Serve 2.58's
  build step itself, the two calls of its build task (serve/_private/application_state.py
  build_serve_application): the error it raises, or None.

    python tests/e2e/pd_builder_probe.py JOBS.json

JOBS.json: {"pd": {name: args}, "serve_build": {name: app}}.

Prints one JSON object: {"pd": {name: {"ray", "app", "without_percentiles"}}, "serve_build":
{name: error or None}}.
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


def both_builders(args: dict[str, Any]) -> dict[str, Any]:
    """Ray's and the app's builder on the args; the app's on them without the percentiles."""
    from ray.serve.llm import build_pd_openai_app

    from serve_extensions import pd_builder
    from serve_extensions.latency_autoscaler import PERCENTILES_ARG

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
    return result


def serve_build_error(app: dict[str, Any]) -> str | None:
    """What Ray Serve's build task raises on the application: its import of the import path and
    its call of the builder with the args (application_state.py build_serve_application, the
    first two steps; every exception there ends the application DEPLOY_FAILED)."""
    from ray._common.utils import import_attr
    from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

    try:
        call_user_app_builder_with_args_if_necessary(import_attr(app["import_path"]), app["args"])
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def main(path: str) -> int:
    jobs = json.loads(Path(path).read_text())
    result = {
        "pd": {name: both_builders(args) for name, args in jobs.get("pd", {}).items()},
        "serve_build": {
            name: serve_build_error(app) for name, app in jobs.get("serve_build", {}).items()
        },
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
