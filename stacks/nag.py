"""Rule packs that gate `cdk synth`: a finding nobody acknowledged fails the synth."""

from __future__ import annotations

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from nag.serving_checks import ServingChecks


def register_nag_packs(app: App) -> None:
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True), ServingChecks(app))
