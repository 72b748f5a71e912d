"""Ray's autoscaler sidecar comes back after it exits. KubeRay 1.7 gives the head pod
restartPolicy Never when autoscaler v2 is on (ray-operator common/pod.go, v1.7.0), so the
kubelet never restarts it; the synthesized args run KubeRay's own start command
(KUBERAY_GEN_AUTOSCALER_START_CMD, which KubeRay puts in the container's environment) in a loop,
under the container command KubeRay gives it (/bin/bash -c --, utils.GetContainerCommand)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.configurations import render_deployed, settings_for

KUBERAY_CONTAINER_COMMAND = ["/bin/bash", "-c", "--"]


def _autoscaler_options() -> dict:
    service = render_deployed(settings_for("default")).rayservice
    return service["spec"]["rayClusterConfig"]["autoscalerOptions"]


def _start(tmp_path: Path, fake_autoscaler: str) -> tuple[subprocess.Popen, Path]:
    """The sidecar with a stand-in for `ray kuberay-autoscaler`: a script, named by plain
    words the way KubeRay's generated command is."""
    (args,) = _autoscaler_options()["args"]
    starts = tmp_path / "starts"
    script = tmp_path / "autoscaler.sh"
    script.write_text(f'echo started >> "{starts}"\n{fake_autoscaler}\n')
    env = {**os.environ, "KUBERAY_GEN_AUTOSCALER_START_CMD": f"bash {script} --cluster-name x"}
    sidecar = subprocess.Popen([*KUBERAY_CONTAINER_COMMAND, args], env=env)
    return sidecar, starts


def _count(starts: Path) -> int:
    return len(starts.read_text().splitlines()) if starts.exists() else 0


def test_kuberay_forces_restart_policy_never_only_with_autoscaler_v2() -> None:
    """The condition the loop answers: this RayService runs autoscaler v2."""
    assert _autoscaler_options()["version"] == "v2"


def test_an_exiting_autoscaler_is_started_again(tmp_path: Path) -> None:
    sidecar, starts = _start(tmp_path, "exit 3")
    try:
        deadline = time.monotonic() + 20
        while _count(starts) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _count(starts) >= 2
        assert sidecar.poll() is None  # the container keeps running
    finally:
        sidecar.kill()
        sidecar.wait()


def test_sigterm_ends_the_sidecar_and_its_autoscaler_at_once(tmp_path: Path) -> None:
    sidecar, starts = _start(tmp_path, "exec sleep 300")
    try:
        deadline = time.monotonic() + 10
        while _count(starts) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        sent = time.monotonic()
        sidecar.send_signal(signal.SIGTERM)
        assert sidecar.wait(timeout=5) == 0
        assert time.monotonic() - sent < 5
        time.sleep(1)
        assert _count(starts) == 1  # not started again after SIGTERM
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
