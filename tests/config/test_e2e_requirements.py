"""`make e2e`'s venv follows the image catalog, lives outside the clone, and is filled once."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from catalog.ray_llm_image import DEFAULT_IMAGE_TAG, IMAGES
from tests.configurations import PROJECT_ROOT
from tools import e2e_requirements

BUMPED = dataclasses.replace(
    IMAGES[DEFAULT_IMAGE_TAG], tag="next", ray_version="9.1.0", vllm_version="0.99.0"
)


def test_the_versions_are_the_configured_images() -> None:
    image = e2e_requirements.configured_image()
    assert image == IMAGES[DEFAULT_IMAGE_TAG]
    assert e2e_requirements.requirements(image)[:2] == [
        f"ray[serve,llm]=={image.ray_version}",
        f"vllm=={image.vllm_version}",
    ]


def test_an_image_bump_moves_the_pins_and_the_venv() -> None:
    lines = e2e_requirements.requirements(BUMPED)
    assert lines[:2] == ["ray[serve,llm]==9.1.0", "vllm==0.99.0"]
    pytest_pin = next(line for line in lines if line.startswith("pytest=="))
    assert pytest_pin in (PROJECT_ROOT / "requirements-dev.txt").read_text().splitlines()
    venv = e2e_requirements.venv_path(BUMPED, {"HOME": "/home/u"})
    assert venv == Path("/home/u/.cache/pd-llm-e2e/ray-9.1.0-vllm-0.99.0")


def test_the_venv_is_under_the_users_cache_not_the_clone() -> None:
    venv = e2e_requirements.venv_path(BUMPED, {"HOME": "/home/u", "XDG_CACHE_HOME": "/c"})
    assert venv == Path("/c/pd-llm-e2e/ray-9.1.0-vllm-0.99.0")
    default = e2e_requirements.venv_path(e2e_requirements.configured_image())
    assert PROJECT_ROOT not in default.parents


def test_a_second_install_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def run(command: list[str], check: bool) -> None:
        calls.append(command)
        if command[1:3] == ["-m", "venv"]:
            (Path(command[3]) / "bin").mkdir(parents=True)
            (Path(command[3]) / "bin" / "python").touch()

    monkeypatch.setattr(subprocess, "run", run)
    venv = tmp_path / "ray-9.1.0-vllm-0.99.0"
    lines = e2e_requirements.requirements(BUMPED)
    assert e2e_requirements.install(venv, lines) is True
    assert [c[1:3] for c in calls] == [["-m", "venv"], ["-m", "pip"]]
    assert calls[1][-len(lines) :] == lines
    assert e2e_requirements.install(venv, lines) is False
    assert len(calls) == 2
    # A changed requirement (a new pytest pin) installs again, into the same venv.
    assert e2e_requirements.install(venv, [*lines[:2], "pytest==0.0.1"]) is True
    assert [c[1:3] for c in calls[2:]] == [["-m", "pip"]]


def test_the_main_suite_leaves_the_e2e_tier_out(request: pytest.FixtureRequest) -> None:
    """tests/e2e imports Ray Serve LLM and vLLM, which only the e2e venv has."""
    assert "tests/e2e" in request.config.getoption("ignore")
