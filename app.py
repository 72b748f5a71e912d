#!/usr/bin/env python3
"""CDK entry point: load the configuration, build the stacks, register the nag packs, synth."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk
from aws_cdk import cx_api

from app_config import ConfigError, load_settings
from stacks.assembly import build_stacks
from stacks.nag import register_nag_packs


def main(context: Mapping[str, Any] | None = None, outdir: str | None = None) -> cx_api.CloudAssembly:
    app = cdk.App(context=dict(context) if context is not None else None, outdir=outdir)
    settings = load_settings(app.node.get_all_context())  # raises before any construct exists
    build_stacks(app, settings)
    register_nag_packs(app)
    return app.synth()


if __name__ == "__main__":
    try:
        main()
    except ConfigError as error:
        sys.exit(str(error))
