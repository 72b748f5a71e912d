"""CDK-style context for tools that run outside `cdk` (pdctl, make manifests): cdk.json's
context, then a configuration file, then `-c key=value` pairs, as `cdk synth` would see them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app_config.loader import CONFIG_FILE_KEY

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cli_context(config_file: str | None, pairs: list[str]) -> dict[str, Any]:
    context: dict[str, Any] = json.loads((PROJECT_ROOT / "cdk.json").read_text())["context"]
    if config_file:
        context[CONFIG_FILE_KEY] = config_file
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator:
            raise ValueError(f"-c {pair!r}: expected key=value")
        context[key] = value
    return context
