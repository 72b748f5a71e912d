"""The app's P/D builder (serve_extensions/pd_builder.py) against Ray Serve LLM 2.58's own, on the
args the project renders under `serving.scaling.policy: latency`: the same application, with each
side's server class swapped for its latency-reporting subclass and the objective's percentile as
the side's user_config; dense and data-parallel sides alike (Ray picks DPPD* classes for
data_parallel_size > 1). And Ray Serve's own build step on the synthesized application and on
each broken variant of it (broken_configs.py): the synthesized one builds, each broken one raises
Ray's message (what Serve then reports as DEPLOY_FAILED: test_refused_configs.py deploys one).
All built in one subprocess (pd_builder_probe.py, in a fork of the session's probe server:
installed_probe.py): Ray's builder starts Ray, once for all of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from broken_configs import BREAKAGES, broken
from harness import Synthesized
from installed_probe import run_forked

from serve_extensions.latency_autoscaler import PERCENTILES_ARG
from serving_manifests.serve_config import render_serve_config
from tests.configurations import settings_for

PROBE = Path(__file__).resolve().parent / "pd_builder_probe.py"
LATENCY = {
    "serving.scaling.policy": "latency",
    "serving.scaling.ttft": json.dumps({"percentile": 95, "value_ms": 800}),
    "serving.scaling.itl": json.dumps({"percentile": 99, "value_ms": 60}),
}
SIDES = {"prefill": "Prefill:", "decode": "Decode:"}
CONFIGURATIONS = ("default", "qwen3-235b-a22b-pd")
AS_SYNTHESIZED = "as-synthesized"  # the control: the synthesized application, unbroken


@pytest.fixture(scope="module")
def probed(synthesized: Synthesized, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every build of this module in one fork: the P/D args of each configuration under policy
    latency, and the synthesized application with and without each breakage."""
    args = {}
    for name in CONFIGURATIONS:
        (application,) = render_serve_config(settings_for(name, **LATENCY))["applications"]
        args[name] = application["args"]
    (synthesized_app,) = synthesized.serve_config["applications"]
    serve_build = {AS_SYNTHESIZED: synthesized_app}
    serve_build.update((name, broken(synthesized_app, name)) for name in BREAKAGES)
    path = tmp_path_factory.mktemp("pd-builder") / "jobs.json"
    path.write_text(json.dumps({"pd": args, "serve_build": serve_build}))
    done = run_forked(script=PROBE, args=(str(path),), timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return {"args": args, **json.loads(line)}


@pytest.fixture(params=CONFIGURATIONS)
def built(request: pytest.FixtureRequest, probed: dict[str, Any]) -> dict[str, Any]:
    return {"args": probed["args"][request.param], **probed["pd"][request.param]}


def side_of(name: str) -> str | None:
    return next((side for side, prefix in SIDES.items() if name.startswith(prefix)), None)


def test_the_app_builds_the_same_deployments_as_ray(built: dict[str, Any]) -> None:
    assert sorted(built["app"]) == sorted(built["ray"])
    assert sorted(filter(None, map(side_of, built["app"]))) == sorted(SIDES)


def test_each_side_runs_a_subclass_of_rays_server_and_nothing_else_changes(
    built: dict[str, Any],
) -> None:
    for name, ray in built["ray"].items():
        ours = built["app"][name]
        side = side_of(name)
        if side is None:  # the ingress: Ray's, untouched
            assert ours == ray
            continue
        assert ours["class"] == f"Latency{ray['class']}"
        assert ray["class"] in ours["bases"]
        assert ours["user_config"] == {"latency_percentile": built["args"][PERCENTILES_ARG][side]}
        for key in ("init_kwargs", "options", "ray_actor_options"):
            assert ours[key] == ray[key], key


def test_the_builder_refuses_args_without_the_percentiles(built: dict[str, Any]) -> None:
    assert PERCENTILES_ARG in (built["without_percentiles"] or "")


def test_serves_build_step_builds_the_synthesized_application(probed: dict[str, Any]) -> None:
    assert probed["serve_build"][AS_SYNTHESIZED] is None


@pytest.mark.parametrize("name", BREAKAGES)
def test_serves_build_step_refuses_a_broken_application_with_rays_message(
    probed: dict[str, Any], name: str
) -> None:
    assert BREAKAGES[name][1] in (probed["serve_build"][name] or ""), probed["serve_build"][name]
