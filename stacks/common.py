"""Small policies shared by every stack, derived from Settings in one place."""

from __future__ import annotations

from aws_cdk import Environment, RemovalPolicy

from app_config import Settings


def removal_policy(settings: Settings) -> RemovalPolicy:
    """What `cdk destroy` does to keys and log groups (resources that hold data)."""
    return RemovalPolicy.RETAIN if settings.retain_data_on_destroy else RemovalPolicy.DESTROY


def environment(settings: Settings) -> Environment:
    """A concrete region always (zones are per region); the account only when configured."""
    return Environment(account=settings.account, region=settings.region)
