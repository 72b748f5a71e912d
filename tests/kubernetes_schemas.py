"""Kubernetes objects checked against the OpenAPI schemas of a cluster's version by
kubernetes-validate (strict: an unknown field fails), with each schema file parsed once per
process.

kubernetes-validate 1.37's `validate` opens and parses the schema files again for every object
it checks, the version's `_definitions.json` (1.5 MB of JSON) among them: 0.46 s for the default
configuration's 16 objects on one minor, against 0.05 s with the files parsed once
(docs/verification.md "Benchmarks", 2026-12-07, issue 29). The files are package data that does
not change while a process runs, and neither jsonschema nor referencing changes a schema it is
given, so each file's parsed contents are kept for the process; the validation itself is the
library's own, unchanged."""

from __future__ import annotations

import functools
from typing import Any

import kubernetes_validate
from kubernetes_validate import utils

# `validate` looks `schema_contents` up in its module at each call; cached once per process.
if not hasattr(utils.schema_contents, "cache_info"):
    utils.schema_contents = functools.cache(utils.schema_contents)

ValidationError = kubernetes_validate.ValidationError


def validate_strictly(document: dict[str, Any], minor: str) -> None:
    """Raises ValidationError unless the object matches the schema of Kubernetes `minor` (for
    example "1.36") with no field the schema does not name."""
    kubernetes_validate.validate(document, f"{minor}.0", strict=True)
