"""What a GPU run records about its machine: the GPU's name and the engine packages' versions
(the image's vLLM, Ray, NIXL and the torch vLLM pins), for `make gpu-check` and `make gpu-bench`."""

from __future__ import annotations

import subprocess
from importlib import metadata

ENGINE_PACKAGES = ("vllm", "ray", "nixl-cu13", "torch")


def versions() -> dict[str, str]:
    found = {}
    for package in ENGINE_PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "missing"
    return found


def gpu_name() -> str:
    """nvidia-smi's name of the first GPU (no CUDA context, no torch import)."""
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")[0]
    except (OSError, subprocess.CalledProcessError):
        return "no GPU"
