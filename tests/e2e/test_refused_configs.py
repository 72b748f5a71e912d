"""A broken Serve config fails with Ray's own message, the way `make e2e` fails when `cdk synth`
writes one (the session fixture's deploy raises it). Broken variants of the synthesized
application are deployed beside the running one, each under its own name and route, all in one
submission (each is built by a Ray task of its own); the running application is left alone."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from harness import DeployError, LocalRay

BUILD_TIMEOUT_S = 240.0


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


@pytest.fixture(scope="module")
def refused(pd: LocalRay, figures: dict[str, Any]) -> Iterator[dict[str, DeployError]]:
    """Serve's verdict on each broken application; afterwards only the synthesized one is left."""
    config = copy.deepcopy(pd.config)
    for name, (breakage, _) in BREAKAGES.items():
        broken = copy.deepcopy(pd.config["applications"][0])
        breakage(broken)
        broken.update(name=f"broken-{name}", route_prefix=f"/broken-{name}")
        config["applications"].append(broken)
    starts = len([r for r in pd.records() if r["event"] == "start"])
    start = time.monotonic()
    verdicts: dict[str, DeployError] = {}
    try:
        pd.put(config)
        for name in BREAKAGES:
            try:
                pd.wait_status(f"broken-{name}", "RUNNING", BUILD_TIMEOUT_S)
            except DeployError as failed:
                verdicts[name] = failed
        figures["broken_configs_refused_after_s"] = round(time.monotonic() - start, 1)
        yield verdicts
    finally:
        pd.put(pd.config)
    pd.wait_status(pd.app_name, "RUNNING", 60)
    # The running application was not touched: no engine started again.
    assert len([r for r in pd.records() if r["event"] == "start"]) == starts


@pytest.mark.parametrize("name", BREAKAGES)
def test_a_broken_serve_config_fails_with_rays_message(
    refused: dict[str, DeployError], name: str
) -> None:
    assert name in refused, f"broken-{name} deployed"
    assert refused[name].status == "DEPLOY_FAILED"
    assert BREAKAGES[name][1] in refused[name].message


def test_the_running_application_stays_up(pd: LocalRay, refused: dict[str, DeployError]) -> None:
    assert pd.applications()[pd.app_name]["status"] == "RUNNING"
