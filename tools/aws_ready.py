"""One line about what `make diff/deploy/destroy` still needs, before the CDK CLI starts.

Without it, the CLI prints CDK's account-resolution error (twice for diff) with no hint of what
to do. Checks credentials (STS GetCallerIdentity) and, for deploy, the CDK bootstrap version.
"""

from __future__ import annotations

import argparse
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from app_config import ConfigError, load_settings
from app_config.cli_context import cli_context

BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
MIN_BOOTSTRAP_VERSION = 6
QUICK = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("action", choices=["diff", "deploy", "destroy"])
    parser.add_argument("-c", "--context", action="append", default=[], help="as for cdk")
    args, _ = parser.parse_known_args(argv)  # the CDK CLI's other flags pass through
    try:
        region = load_settings(cli_context(None, args.context)).region
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    try:
        identity = boto3.client("sts", region_name=region, config=QUICK).get_caller_identity()
    except (BotoCoreError, ClientError) as error:
        print(
            f"make {args.action} needs AWS credentials for the target account ({error}); set "
            "AWS_PROFILE or run `aws configure sso`, then retry",
            file=sys.stderr,
        )
        return 1
    if args.action == "deploy":
        try:
            version = boto3.client("ssm", region_name=region, config=QUICK).get_parameter(
                Name=BOOTSTRAP_VERSION_PARAMETER
            )["Parameter"]["Value"]
        except (BotoCoreError, ClientError):
            version = "0"
        if int(version) < MIN_BOOTSTRAP_VERSION:
            print(
                f"account {identity['Account']} in {region} is not CDK-bootstrapped (version "
                f"{version}, need {MIN_BOOTSTRAP_VERSION}+): run `npx cdk bootstrap "
                f"aws://{identity['Account']}/{region}` once, then retry",
                file=sys.stderr,
            )
            return 1
    print(f"{args.action}: account {identity['Account']}, {region}, as {identity['Arn']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
