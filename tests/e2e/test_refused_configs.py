"""A broken Serve config fails with Ray's own message, the way `make e2e` fails when `cdk synth`
writes one (the session fixture's deploy raises it). One broken variant of the synthesized
application (an engine argument vLLM does not know) is deployed beside the running one, under its
own name and route; the running application is left alone.

Why one: every build failure ends the same way in Serve (Ray 2.58 build_serve_application wraps
the builder's exception in a RuntimeError; the task's ``max_retries=3, retry_exceptions=True``
build it four times, each in a fresh worker that imports vLLM, ``max_calls=1``; then the
application is DEPLOY_FAILED with the builder's message). The builder's message for each of the
breakages in broken_configs.py is Ray's build step's own, checked in test_pd_builder.py."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest
from broken_configs import BREAKAGES, broken
from harness import DeployError, LocalRay

BUILD_TIMEOUT_S = 240.0
DEPLOYED = "unknown-engine-argument"


@pytest.fixture(scope="module")
def refused(pd: LocalRay, figures: dict[str, Any]) -> Iterator[DeployError | None]:
    """Serve's verdict on the broken application; afterwards only the synthesized one is left."""
    config = copy.deepcopy(pd.config)
    config["applications"].append(broken(pd.config["applications"][0], DEPLOYED))
    starts = len([r for r in pd.records() if r["event"] == "start"])
    start = time.monotonic()
    verdict: DeployError | None = None
    try:
        pd.put(config)
        try:
            pd.wait_status(f"broken-{DEPLOYED}", "RUNNING", BUILD_TIMEOUT_S)
        except DeployError as failed:
            verdict = failed
        figures["broken_config_refused_after_s"] = round(time.monotonic() - start, 1)
        yield verdict
    finally:
        pd.put(pd.config)
    pd.wait_status(pd.app_name, "RUNNING", 60)
    # The running application was not touched: no engine started again.
    assert len([r for r in pd.records() if r["event"] == "start"]) == starts


def test_a_broken_serve_config_fails_with_rays_message(refused: DeployError | None) -> None:
    assert refused is not None, f"broken-{DEPLOYED} deployed"
    assert refused.status == "DEPLOY_FAILED"
    assert BREAKAGES[DEPLOYED][1] in refused.message


def test_the_running_application_stays_up(pd: LocalRay, refused: DeployError | None) -> None:
    assert pd.applications()[pd.app_name]["status"] == "RUNNING"
