"""`make e2e`'s venv: the serving packages of the Ray LLM image the configuration deploys, and
where their venv lives.

The versions come from the image catalog (`catalog/ray_llm_image.py`) for `serving.image_tag`, so
an image bump moves the end-to-end tier with it. The venv is several GB (torch comes with vLLM):
it lives outside the clone, under the user's cache, keyed by the Ray and vLLM versions, so every
clone on the machine shares it and a second run installs nothing.

    python -m tools.e2e_requirements requirements   # pip requirement lines
    python -m tools.e2e_requirements venv           # the venv's path
    python -m tools.e2e_requirements install        # create and fill it unless already done
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from app_config import load_settings
from app_config.cli_context import cli_context
from catalog.ray_llm_image import IMAGES, RayLlmImage

ROOT = Path(__file__).resolve().parent.parent
CACHE_FOLDER = "pd-llm-e2e"
STAMP = ".pd-llm-e2e-requirements"  # in the venv: the requirement lines it was filled with


def configured_image() -> RayLlmImage:
    """The image `cdk synth` puts in the RayService (cdk.json's settings)."""
    return IMAGES[load_settings(cli_context(None, [])).serving.image_tag]


def _dev_pin(package: str) -> str:
    """The test tools' pins, from requirements-dev.txt, so both tiers run the same pytest."""
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        if re.match(rf"{re.escape(package)}==", line.strip()):
            return line.strip()
    raise LookupError(f"{package} is not pinned in requirements-dev.txt")


def requirements(image: RayLlmImage) -> list[str]:
    """What the image serves with (Ray Serve LLM pins the vLLM it was built against; naming it
    too makes a catalog row that disagrees with Ray fail at install), and the test runner."""
    return [
        f"ray[serve,llm]=={image.ray_version}",
        f"vllm=={image.vllm_version}",
        _dev_pin("pytest"),
    ]


def venv_path(image: RayLlmImage, environ: Mapping[str, str] = os.environ) -> Path:
    """${XDG_CACHE_HOME:-$HOME/.cache}/pd-llm-e2e/ray-<ray>-vllm-<vllm>."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    name = f"ray-{image.ray_version}-vllm-{image.vllm_version}"
    return Path(cache).expanduser() / CACHE_FOLDER / name


def install(venv: Path, lines: list[str]) -> bool:
    """Create the venv and install ``lines`` unless its stamp already lists exactly them; False
    when there was nothing to do. A lock beside the venv serialises clones installing at once;
    the stamp is written last, so an interrupted install is redone."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    wanted = "\n".join(lines) + "\n"
    stamp = venv / STAMP
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == wanted:
            return False
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
        subprocess.run([*pip, "-qq", *lines], check=True)
        stamp.write_text(wanted)
        return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("requirements", "venv", "install"))
    args = parser.parse_args(argv)
    image = configured_image()
    if args.what == "requirements":
        print("\n".join(requirements(image)))
    elif args.what == "venv":
        print(venv_path(image))
    else:
        venv = venv_path(image)
        if install(venv, requirements(image)):
            print(f"installed {' '.join(requirements(image))} into {venv}")


if __name__ == "__main__":
    main()
