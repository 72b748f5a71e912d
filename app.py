#!/usr/bin/env python3
"""CDK entry point: load the configuration, build the stacks, register the nag packs, synth."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk

from app_config import ConfigError, Settings, load_settings
from stacks.assembly import Stacks, build_stacks
from stacks.nag import register_nag_packs


@dataclass(frozen=True)
class BuiltApp:
    app: cdk.App
    settings: Settings
    stacks: Stacks


def build(context: Mapping[str, Any] | None = None, outdir: str | None = None) -> BuiltApp:
    """Everything but synthesis; ``context`` None means the CLI's (cdk.json and -c)."""
    app = cdk.App(context=dict(context) if context is not None else None, outdir=outdir)
    settings = load_settings(app.node.get_all_context())  # raises before any construct exists
    stacks = build_stacks(app, settings)
    register_nag_packs(app)
    return BuiltApp(app, settings, stacks)


def main() -> None:
    try:
        build().app.synth()
    except ConfigError as error:
        sys.exit(str(error))
    except RuntimeError as error:
        if "ValidationFailed" not in str(error):
            raise
        # The report itself was already printed by the CDK; the jsii traceback adds nothing.
        sys.exit("cdk-nag found unacknowledged findings; see the report above and cdk.out/*.json")


if __name__ == "__main__":
    main()
