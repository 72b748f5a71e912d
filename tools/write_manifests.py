"""`make manifests`: write the serving manifests, one file per object, for review and for
`kubectl apply --dry-run=server -f build/manifests/` against a real cluster.

Uses the same configuration as `cdk synth` (cdk.json, then `--config file.yaml`, then
`-c key=value`). The service account's IRSA role ARN exists only after deploy: pass it with
`--role-arn` (the stack output) or the annotation is left out.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from app_config import ConfigError, load_settings
from app_config.cli_context import cli_context
from serving_manifests import ServingManifests, render

ROOT = Path(__file__).resolve().parent.parent
# What the serving stack's ModelAccessRoleArn output looks like; anything else in the IRSA
# annotation would leave the workers without credentials at run time.
ROLE_ARN = re.compile(r"arn:aws(-us-gov)?:iam::\d{12}:role/[\w+=,.@/-]{1,512}")


def write_manifests(manifests: ServingManifests, outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    for stale in outdir.glob("*.yaml"):
        stale.unlink()
    written = []
    for index, document in enumerate(manifests.all()):
        path = (
            outdir / f"{index:02d}-{document['kind'].lower()}-{document['metadata']['name']}.yaml"
        )
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        written.append(path)
    serve = outdir / "serve-config.yaml"  # the serveConfigV2 inside the RayService, readable
    serve.write_text(yaml.safe_dump(manifests.serve_config, sort_keys=False))
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "manifests")
    parser.add_argument("--config", help="YAML configuration file, as `cdk synth -c config=...`")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--role-arn", help="the serving stack's ModelAccessRoleArn output")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(cli_context(args.config, args.context))
    except (ConfigError, ValueError) as error:
        sys.exit(str(error))
    if args.role_arn is not None and not ROLE_ARN.fullmatch(args.role_arn):
        sys.exit(
            f"--role-arn {args.role_arn!r}: not an IAM role ARN; pass the serving stack's "
            "ModelAccessRoleArn output (arn:aws:iam::<account>:role/<name>)"
        )
    try:
        account = args.role_arn.split(":")[4] if args.role_arn else None
        manifests = render(settings, args.role_arn, account=account)
    except ValueError as error:  # GCS fault tolerance: the store exists only once deployed
        sys.exit(f"{error}; read the applied RayService from the cluster instead")
    try:
        written = write_manifests(manifests, args.out)
    except OSError as error:
        sys.exit(f"--out {args.out}: cannot write there ({error.strerror})")
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


if __name__ == "__main__":
    main()
