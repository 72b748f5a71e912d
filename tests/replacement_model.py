"""Which resources a CloudFormation update replaces, decided as CloudFormation decides it: a
resource whose logical id disappears is deleted (and a new id created), and a resource whose
change touches one of its type's createOnlyProperties is replaced. The property lists come from
the CloudFormation resource provider schemas that cfn-lint ships (the registry's own schemas).
Custom resources have no schema: they update in place."""

from __future__ import annotations

from functools import cache
from typing import Any

REGION = "us-east-1"  # the schemas are the same in every region for these types


@cache
def create_only_paths(resource_type: str) -> tuple[tuple[str, ...], ...]:
    if not resource_type.startswith("AWS::"):
        return ()
    # Imported here: cfn-lint (and the sympy it loads) costs every xdist worker about half a
    # second at collection, and only the workers that run a routine-change test need it.
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(REGION, resource_type).schema
    return tuple(
        tuple(part for part in path.split("/")[2:] if part != "*")
        for path in schema.get("createOnlyProperties", [])
    )


def _at(properties: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = properties
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def replaced(before: dict[str, Any], after: dict[str, Any]) -> dict[str, str]:
    """Logical id -> why, for every resource of ``before`` that the update to ``after`` deletes
    or replaces."""
    found = {}
    old, new = before.get("Resources", {}), after.get("Resources", {})
    for logical_id, resource in old.items():
        if logical_id not in new:
            found[logical_id] = f"{resource['Type']} removed"
            continue
        if new[logical_id]["Type"] != resource["Type"]:
            found[logical_id] = "type changed"
            continue
        props_old = resource.get("Properties", {})
        props_new = new[logical_id].get("Properties", {})
        for path in create_only_paths(resource["Type"]):
            if _at(props_old, path) != _at(props_new, path):
                found[logical_id] = f"{resource['Type']} {'/'.join(path)} changed"
                break
    return found
