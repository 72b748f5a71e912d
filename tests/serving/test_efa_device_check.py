"""The GPU worker pods' EFA device check (init container `efa-devices`): rendered from the catalog
for each configuration, and its own shell script run in bash against libfabric's `fi_info` as
tests/fabtests_model.py prints it (libfabric v2.4.0's rules), with the node's uverbs devices in a
directory of our own.

The deciding rules: vLLM 0.26 on NIXL's LIBFABRIC backend without a usable EFA device dies with
NIXL_ERR_NOT_FOUND only after its weights are loaded (seen with real engines, 2026-12-01); the
kubelet gives an init container's devices on to its pod's app containers (devicemanager
`devicesToReuse`); the pod's effective request is the larger of the init container's and the app
containers' sum (Kubernetes docs, Init Containers); KubeRay 1.7 gives worker pods restartPolicy
Never under autoscaler v2 and deletes a Failed worker pod (common/pod.go, raycluster_controller.go
shouldDeletePod)."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
import typer

from app_config import Settings, load_settings
from app_config.node_labels import EFA_RESOURCE, GPU_ROLES
from pdctl import efa_jobs
from pdctl.cli import app as pdctl_app
from serving_manifests import ServingManifests
from serving_manifests import efa_device_check as check
from tests.configurations import CONFIGURATIONS, PROJECT_ROOT, context_for, render_deployed
from tests.fabtests_model import ENODATA, Node
from tests.node_fit_model import effective_requests

NODE = "ip-10-0-64-17.us-west-2.compute.internal"
RUNBOOK = "docs/observability.md, 'EFA runbook'"


@pytest.fixture(scope="module", params=list(CONFIGURATIONS))
def rendered(request: pytest.FixtureRequest) -> tuple[Settings, ServingManifests]:
    settings = load_settings(context_for(request.param))
    return settings, render_deployed(settings)


def _cluster(manifests: ServingManifests) -> dict:
    return manifests.rayservice["spec"]["rayClusterConfig"]


def _worker_specs(manifests: ServingManifests) -> dict[str, dict]:
    return {g["groupName"]: g["template"]["spec"] for g in _cluster(manifests)["workerGroupSpecs"]}


def _check(spec: dict) -> dict:
    (container,) = [c for c in spec.get("initContainers", []) if c["name"] == check.CONTAINER]
    return container


def _env(container: dict) -> dict[str, object]:
    return {v["name"]: v.get("value", v.get("valueFrom")) for v in container["env"]}


# --- rendered --------------------------------------------------------------------------------


def test_only_gpu_worker_pods_check_their_efa_devices_and_first(rendered) -> None:
    settings, manifests = rendered
    head = _cluster(manifests)["headGroupSpec"]["template"]["spec"]
    assert check.CONTAINER not in [c["name"] for c in head.get("initContainers", [])]
    specs = _worker_specs(manifests)
    assert set(specs) == set(settings.gpu_nodes.groups())
    for spec in specs.values():
        # KubeRay appends its wait-gcs-ready: ours stays first, before Ray is waited for.
        assert spec["initContainers"][0]["name"] == check.CONTAINER


def test_the_check_expects_every_efa_device_its_pod_requests(rendered) -> None:
    settings, manifests = rendered
    for role, spec in _worker_specs(manifests).items():
        cards = settings.gpu_nodes.groups()[role].instance.network_cards  # the catalog's
        (ray,) = spec["containers"]
        init = _check(spec)
        env = _env(init)
        assert ray["resources"]["limits"][EFA_RESOURCE] == str(cards)
        assert env[check.DEVICES_ENV] == str(cards)
        # Asking for the devices itself is what gives the init container the engine's ones.
        assert init["resources"]["requests"][EFA_RESOURCE] == str(cards)
        assert init["resources"]["limits"][EFA_RESOURCE] == str(cards)
        assert env[check.SIDE_ENV] == role
        assert env[check.NODE_ENV] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_check_initialises_libfabric_as_the_engine_does(rendered) -> None:
    _, manifests = rendered
    for spec in _worker_specs(manifests).values():
        (ray,) = spec["containers"]
        init = _check(spec)
        libfabric = [v for v in ray["env"] if v["name"].startswith(check.LIBFABRIC_ENV_PREFIX)]
        assert {v["name"] for v in libfabric} >= {"FI_PROVIDER"}
        assert [v for v in init["env"] if v["name"].startswith("FI_")] == libfabric
        assert init["image"] == ray["image"]
        assert init["imagePullPolicy"] == ray["imagePullPolicy"]


def test_the_check_reads_the_listing_pdctl_efa_check_reads(rendered) -> None:
    _, manifests = rendered
    for spec in _worker_specs(manifests).values():
        assert efa_jobs.fi_info_command() in _script(spec)


def test_the_check_asks_the_node_for_nothing_the_ray_container_does_not(rendered) -> None:
    """The scheduler and the Cluster Autoscaler see the same pod as before the check."""
    _, manifests = rendered
    for spec in _worker_specs(manifests).values():
        (ray,) = spec["containers"]
        without = {**spec, "initContainers": []}
        assert effective_requests(spec) == effective_requests(without)
        for resource, amount in effective_requests({"containers": [_check(spec)]}).items():
            assert amount <= effective_requests({"containers": [ray]}).get(resource, Decimal(0))


# --- the script, run -------------------------------------------------------------------------


def _script(spec: dict) -> str:
    return _check(spec)["command"][2]


def _fake_fi_info(directory: Path, node: Node, exit_code: int | None) -> dict[str, str]:
    """PATH with tests/fabtests_model.py's fi_info for ``node`` (or one that is not there:
    ``exit_code`` 127, as bash reports a missing command)."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(parents=True)
    node_file = directory / "node.json"
    node.save(str(node_file))
    if exit_code != 127:
        tool = bin_dir / "fi_info"
        tool.write_text(
            f'#!/bin/bash\nexec "{sys.executable}" -m tests.fabtests_model fi_info "$@"\n'
        )
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    # Only what the script calls: a fi_info elsewhere on this machine's PATH is never found.
    for name in ("ls", "grep", "awk", "sort", "tail", "sleep"):
        (bin_dir / name).symlink_to(shutil.which(name))
    return {"PATH": str(bin_dir), "PYTHONPATH": str(PROJECT_ROOT), "FABTESTS_NODE": str(node_file)}


def run_check(
    tmp_path: Path,
    spec: dict,
    uverbs: int,
    libfabric_devices: int,
    fi_info_missing: bool = False,
    linger: str = "0",
) -> subprocess.CompletedProcess:
    """The rendered script with the rendered environment, the pod's node given as the downward
    API would, and ``uverbs`` devices in the device directory."""
    devices = tmp_path / "infiniband"
    devices.mkdir()
    for index in range(uverbs):
        (devices / f"uverbs{index}").touch()
    node = Node([f"rdmap{16 * (i + 1)}s27" for i in range(libfabric_devices)])
    env = {name: str(value) for name, value in _env(_check(spec)).items()}
    env |= {check.NODE_ENV: NODE, check.LINGER_ENV: linger}
    env |= _fake_fi_info(tmp_path, node, 127 if fi_info_missing else None)
    script = _script(spec).replace(check.DEVICE_DIRECTORY, str(devices))
    return subprocess.run(
        [shutil.which("bash"), "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def default_specs() -> tuple[Settings, dict[str, dict]]:
    settings = load_settings(context_for("default"))
    return settings, _worker_specs(render_deployed(settings))


def _cards(settings: Settings, role: str) -> int:
    return settings.gpu_nodes.groups()[role].instance.network_cards


@pytest.mark.parametrize("role", GPU_ROLES)
def test_a_pod_with_every_device_it_was_allocated_starts_ray(default_specs, role, tmp_path):
    settings, specs = default_specs
    cards = _cards(settings, role)
    started = time.monotonic()
    result = run_check(tmp_path, specs[role], uverbs=cards, libfabric_devices=cards, linger="30")
    assert result.returncode == 0, result.stderr
    assert f"EFA check passed on the {role} node {NODE}: {cards} EFA devices" in result.stdout
    assert time.monotonic() - started < 30  # no linger on success


# Each row: (uverbs devices the pod sees, devices libfabric lists, fi_info missing) as a
# function of the allocated count n -> what the message must say.
FAILURES = {
    "one device libfabric cannot open": (
        lambda n: (n, n - 1, False),
        lambda n: [f"expected {n} EFA devices", f"found {n - 1} ", f"{n - 1} listed by libfabric"],
    ),
    "one uverbs device missing from the pod": (
        lambda n: (n - 1, n, False),
        lambda n: [f"expected {n} EFA devices", f"found {n - 1} ", f"{n - 1} uverbs devices"],
    ),
    "no EFA device at all: fi_info fails": (
        lambda n: (0, 0, False),
        lambda n: [
            f"expected {n} EFA devices",
            "found 0 ",
            f"failed with exit status {ENODATA}: fi_getinfo: -{ENODATA} (No data available)",
        ],
    ),
    "devices there, fi_info not in the image": (
        lambda n: (n, n, True),
        lambda n: [f"expected {n} EFA devices", "found 0 ", "failed with exit status 127"],
    ),
}


@pytest.mark.parametrize("case", list(FAILURES))
@pytest.mark.parametrize("role", GPU_ROLES)
def test_a_pod_short_of_efa_devices_fails_before_ray_with_the_runbooks_message(
    default_specs, role, case, tmp_path
) -> None:
    settings, specs = default_specs
    cards = _cards(settings, role)
    given, fragments = FAILURES[case]
    uverbs, listed, missing = given(cards)
    result = run_check(tmp_path, specs[role], uverbs, listed, fi_info_missing=missing)
    assert result.returncode != 0
    message = result.stderr
    for fragment in [
        f"EFA check failed on the {role} node {NODE}",
        *fragments(cards),
        "NIXL_ERR_NOT_FOUND",
        f"kubectl cordon {NODE}",
        f"pdctl efa-check --{role}-node {NODE}",
        RUNBOOK,
    ]:
        assert fragment in message, (fragment, message)


def test_a_failure_waits_the_rendered_linger_before_the_pod_fails(default_specs, tmp_path):
    """KubeRay deletes a Failed worker pod at once: the wait keeps its log readable and the
    delete-and-recreate cycle on one node at least that long."""
    settings, specs = default_specs
    cards = _cards(settings, "decode")
    linger = _env(_check(specs["decode"]))[check.LINGER_ENV]
    assert int(linger) >= 30
    started = time.monotonic()
    result = run_check(tmp_path, specs["decode"], cards, cards - 1, linger="2")
    assert result.returncode != 0
    assert time.monotonic() - started >= 2


@pytest.mark.parametrize("role", GPU_ROLES)
def test_the_printed_pdctl_command_is_one_pdctl_accepts(role) -> None:
    efa_check = typer.main.get_command(pdctl_app).commands["efa-check"]  # type: ignore[attr-defined]
    options = {option for param in efa_check.params for option in param.opts}
    assert f"--{role}-node" in options


def test_the_runbook_the_message_points_to_exists_and_knows_the_check() -> None:
    page = (PROJECT_ROOT / "docs" / "observability.md").read_text()
    runbook = page[page.index("**EFA runbook.**") :]
    assert check.CONTAINER in runbook
    assert "EFA check failed on the" in runbook
