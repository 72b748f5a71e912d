"""Broken variants of the synthesized Serve application and the message Ray gives for each: an
unknown engine argument, prefill and decode model ids that differ, a wrong import path.

Two places judge them. test_pd_builder.py runs Ray Serve's build step on every one (the two
calls of Ray 2.58's build task, serve/_private/application_state.py build_serve_application, in
the one fork of the probe server that also builds the P/D applications), and
test_refused_configs.py deploys one of them through Serve beside the running application: how
any failure of that step ends (the task raises; Ray retries it, ``max_retries=3``, each attempt
a fresh worker importing vLLM, ``max_calls=1``; then DEPLOY_FAILED with the builder's message).
Deploying all of them through Serve showed the same ending three times at twelve vLLM imports.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any


def unknown_engine_argument(app: dict[str, Any]) -> None:
    app["args"]["decode_config"]["engine_kwargs"]["no_such_argument"] = 1


def model_ids_differ(app: dict[str, Any]) -> None:
    app["args"]["decode_config"]["model_loading_config"]["model_id"] += "-other"


def wrong_import_path(app: dict[str, Any]) -> None:
    app["import_path"] = app["import_path"].replace("build_pd_openai_app", "build_pd_app")


BREAKAGES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown-engine-argument": (
        unknown_engine_argument,
        "Unknown engine argument: no_such_argument",
    ),
    "model-ids-differ": (model_ids_differ, "P/D model id mismatch"),
    "wrong-import-path": (wrong_import_path, "has no attribute 'build_pd_app'"),
}


def broken(app: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of the application (one entry of a Serve config's ``applications``) with the
    breakage ``name`` applied, under its own name and route."""
    copied = copy.deepcopy(app)
    BREAKAGES[name][0](copied)
    copied.update(name=f"broken-{name}", route_prefix=f"/broken-{name}")
    return copied
