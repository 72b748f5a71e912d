"""The image catalog's versions follow the packages the image installs, read from their metadata:
the DLC installs ray[llm] from upstream wheels, and ray's wheel pins vLLM and NIXL exactly."""

from __future__ import annotations

import importlib.metadata

import pytest
from packaging.requirements import Requirement

from catalog.ray_llm_image import IMAGES

RAY = importlib.metadata.version("ray")
SAME_RAY = [image for image in IMAGES.values() if image.ray_version == RAY]


def _llm_extra_pins() -> dict[str, str]:
    """Package -> exact version that `ray[llm]` pins, from the installed ray's METADATA."""
    pins = {}
    for line in importlib.metadata.requires("ray") or []:
        requirement = Requirement(line)
        if requirement.marker is None or not requirement.marker.evaluate({"extra": "llm"}):
            continue
        exact = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if exact:
            pins[requirement.name] = exact[0]
    return pins


@pytest.mark.skipif(not SAME_RAY, reason=f"no catalog image carries the installed ray {RAY}")
@pytest.mark.parametrize("image", SAME_RAY, ids=lambda image: image.tag)
def test_nixl_and_vllm_are_what_the_images_ray_llm_pins(image) -> None:
    pins = _llm_extra_pins()
    assert pins["vllm"] == image.vllm_version
    # The cu13 build is the one the CUDA 13 image runs; both names carry the same version.
    assert pins["nixl"] == pins["nixl-cu13"] == image.nixl_version
