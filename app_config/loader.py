"""Builds Settings from CDK context: cdk.json, then a YAML file, then `-c` overrides.

Precedence, lowest first:
1. ``settings`` in cdk.json (the defaults that synthesize);
2. the YAML file named by ``-c config=path/to/file.yaml`` (same shape as ``settings``);
3. ``-c section.key=value`` for any setting (``-c network.nat_gateways=2``); values that start
   with ``[`` or ``{`` are parsed as JSON/YAML, other strings are coerced by the model.

Every problem is collected before anything is raised: unknown keys, unreadable sources, each
top-level setting validated on its own, and every check across sections whose settings are
themselves valid; one run reports them all.
"""

from __future__ import annotations

import copy
import difflib
import functools
import os
import re
from collections.abc import Mapping
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from app_config.errors import ConfigError, Problem, problems_from_validation_error
from app_config.model import FIELDS_ONLY, Settings
from app_config.rules import errors, evaluate
from app_config.yaml_source import YamlError, load_yaml, read_yaml_file
from catalog.regions import REGIONS, default_zone_ids

SETTINGS_KEY = "settings"
CONFIG_FILE_KEY = "config"
# Context keys that belong to CDK itself: feature flags start with '@', the CLI's own
# (aws:cdk:version-reporting, ...) and cached lookups (availability-zones:account=...) contain
# ':', and `cdk acknowledge` writes this one. Every other key is ours, and must be known.
CDK_CONTEXT_KEYS = frozenset({"acknowledged-issue-numbers"})
_SETTING_NAME = re.compile(r"[a-z][a-z0-9_]*")
# Settings derived from the region when not given (network zones).
_DERIVED = ("network.availability_zones", "network.gpu_availability_zone")
_MISSING = "required setting is missing"


def load_settings(context: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Settings:
    """Validate the whole configuration, or raise ConfigError listing every problem found."""
    problems = [Problem(key, _unknown_key_message(key)) for key in context if _is_unknown(key)]
    raw = _merged_sources(context, problems)
    if "account" not in raw and environ.get("CDK_DEFAULT_ACCOUNT"):
        raw["account"] = environ["CDK_DEFAULT_ACCOUNT"]
    raw = with_section_defaults(Settings, raw)
    problems += _derive_zones(raw)
    problems += _validate(raw)
    explained = {problem.path for problem in problems if problem.message != _MISSING}
    problems = [p for p in problems if not (p.message == _MISSING and p.path in explained)]
    if problems:
        raise ConfigError(problems)
    try:
        # Every rule across sections ran in _validate on these same values, all of them valid:
        # running them again here doubled the cost of every synth and `pdctl` call.
        return Settings.model_validate(raw, context={FIELDS_ONLY: True})
    except ValidationError as error:  # the fields were validated above; kept for safety
        raise ConfigError(problems_from_validation_error(error, Settings)) from None


def with_section_defaults(model: type[BaseModel], raw: Any) -> Any:
    """Fill a partly given section from its default, recursively: `-c
    gpu_nodes.decode.scaling.max_size=3` changes one number of the default scaling instead of
    asking for the other two. Sections whose default is a model instance are filled from it;
    required sections (no default) are left as given."""
    if not isinstance(raw, dict):
        return raw
    filled = dict(raw)
    for name, field in model.model_fields.items():
        if name not in filled or not isinstance(filled[name], dict):
            continue
        section = field.annotation
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            continue
        given = with_section_defaults(section, filled[name])
        if isinstance(field.default, BaseModel):
            base = field.default.model_dump(mode="python", exclude_unset=False)
            _deep_merge(base, given)
            given = base
        filled[name] = given
    return filled


def _merged_sources(context: Mapping[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """cdk.json's settings, the file, then the `-c` overrides; what cannot be read is added to
    ``problems`` and left out."""
    base = context.get(SETTINGS_KEY) or {}
    if not isinstance(base, Mapping):
        problems.append(Problem(SETTINGS_KEY, "must be a mapping of settings", base))
        base = {}
    raw = copy.deepcopy(dict(base))
    if CONFIG_FILE_KEY in context:
        path = context[CONFIG_FILE_KEY]
        try:
            loaded = read_yaml_file(str(path))
        except YamlError as problem:
            problems.append(Problem(CONFIG_FILE_KEY, str(problem), path))
        else:
            if loaded is None or loaded == {}:
                problems.append(Problem(
                    CONFIG_FILE_KEY,
                    "holds no settings (empty, or only comments): a configuration file that "
                    "says nothing is a mistake, such as a truncated or wrong file; name settings "
                    "in it, or leave -c config out to synthesize cdk.json's settings",
                    path,
                ))  # fmt: skip
            elif isinstance(loaded, dict):
                _deep_merge(raw, loaded)
            else:
                problems.append(Problem(CONFIG_FILE_KEY, "must hold a mapping of settings", path))
    for key, value in context.items():
        if not _is_setting_override(key):
            continue
        parts = key.split(".")
        bad = next((i for i, part in enumerate(parts) if not _SETTING_NAME.fullmatch(part)), None)
        if bad is not None:
            problems.append(Problem(key, _not_a_setting_name(parts, bad)))
            continue
        try:
            _set_path(raw, parts, _parse_override(value))
        except (YamlError, ValueError) as problem:
            problems.append(Problem(key, str(problem), value))
    return raw


def _derive_zones(raw: dict[str, Any]) -> list[Problem]:
    """Zones follow the region unless given: the region's first two AZ IDs (an existing VPC's
    private subnets' zones), the GPU zone the first of the zones (an existing GPU subnet's). A
    reservation lives in one zone that only its owner knows, so with one the GPU zone must be
    given."""
    region = raw.get("region")
    network = raw.get("network")
    if network is None:
        network = raw["network"] = {}
    if not isinstance(network, dict) or not isinstance(region, str) or region not in REGIONS:
        return []
    subnet_zones = _existing_subnet_zones(network)
    if "availability_zones" not in network:
        network["availability_zones"] = subnet_zones.get("private") or default_zone_ids(region)
    zones = network["availability_zones"]
    if "gpu_availability_zone" in network:
        return []
    if "gpu" in subnet_zones:
        network["gpu_availability_zone"] = subnet_zones["gpu"][0]
        return []
    groups = raw.get("gpu_nodes")
    reserved = [
        role
        for role, group in (groups.items() if isinstance(groups, dict) else ())
        if isinstance(group, dict)
        and isinstance(group.get("capacity"), dict)
        and group["capacity"].get("type", "on_demand") != "on_demand"
    ]
    if reserved:
        return [
            Problem(
                "network.gpu_availability_zone",
                f"required with reserved capacity (gpu_nodes.{reserved[0]}.capacity): set it to "
                "the reservation's zone, its AZ ID from `aws ec2 describe-capacity-reservations`",
            )
        ]
    if isinstance(zones, list) and zones and isinstance(zones[0], str):
        network["gpu_availability_zone"] = zones[0]
    return []


def _existing_subnet_zones(network: dict[str, Any]) -> dict[str, list[str]]:
    """With an existing VPC the zones are its subnets': the private subnets' zones, and the GPU
    subnet's, when given in a shape that can be read (what is not is the model's to report)."""
    existing = network.get("existing_vpc")
    if not isinstance(existing, dict):
        return {}
    found: dict[str, list[str]] = {}
    for key, group in (
        ("private", existing.get("private_subnets")),
        ("gpu", existing.get("gpu_subnet")),
    ):
        subnets = [group] if isinstance(group, dict) else group
        if not isinstance(subnets, list) or not subnets:
            continue
        zones = [s.get("availability_zone") for s in subnets if isinstance(s, dict)]
        if len(zones) == len(subnets) and all(isinstance(zone, str) for zone in zones):
            found[key] = zones
    return found


def _validate(raw: dict[str, Any]) -> list[Problem]:
    """Each top-level setting on its own, then every check across sections whose settings all
    passed: one run reports every problem."""
    problems = []
    settings = Settings.model_construct()
    valid = set()
    for name, field in Settings.model_fields.items():
        if name not in raw:
            if field.is_required():
                problems.append(Problem(name, _MISSING))
            else:
                valid.add(name)
            continue
        try:
            Settings.__pydantic_validator__.validate_assignment(
                settings, name, raw[name], context={FIELDS_ONLY: True}
            )
        except ValidationError as error:
            problems += problems_from_validation_error(error, Settings)
        else:
            valid.add(name)
    for name in raw:
        if name not in Settings.model_fields:
            close = difflib.get_close_matches(str(name), list(Settings.model_fields), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            known = ", ".join(sorted(Settings.model_fields))
            problems.append(Problem(str(name), f"unknown setting; {hint}valid settings: {known}"))
    if "region" not in valid:  # nothing was derived from it; its own problem says why
        problems = [p for p in problems if not (p.path in _DERIVED and p.value is None)]
    return problems + errors(evaluate(settings, valid))


@functools.lru_cache(maxsize=4096)  # asked twice of each of cdk.json's ~100 keys per load
def _is_cdks_own(key: str) -> bool:
    """CDK's keys: feature flags ('@...'), `cdk acknowledge`'s, and those with a ':' (the CLI's
    aws:cdk:..., cached lookups such as availability-zones:account=...:region=...), none of
    which begins with a setting's name. A key that does (`-c tags.cost:center=x`,
    `-c serving.model.id:x=y`) is ours, and is judged rather than silently passed over."""
    head = re.split(r"[.:]", key, maxsplit=1)[0]
    return (
        key.startswith("@")
        or key in CDK_CONTEXT_KEYS
        or (":" in key and head not in (*Settings.model_fields, SETTINGS_KEY, CONFIG_FILE_KEY))
    )


def _is_unknown(key: str) -> bool:
    return not (
        key in (SETTINGS_KEY, CONFIG_FILE_KEY)
        or _is_cdks_own(key)
        or "." in key  # a dotted setting: validated against the model
        or key in Settings.model_fields
    )


def _unknown_key_message(key: str) -> str:
    known = [*Settings.model_fields, CONFIG_FILE_KEY]
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"unknown context key; {hint}settings are {', '.join(sorted(known))} or dotted paths "
        "such as network.nat_gateways (CDK's own keys start with '@' or contain ':')"
    )


def _is_setting_override(key: str) -> bool:
    """`-c` keys aimed at Settings. CDK's own context keys contain ':' or start with '@'."""
    if key in (SETTINGS_KEY, CONFIG_FILE_KEY) or _is_cdks_own(key):
        return False
    return "." in key or key in Settings.model_fields


def _not_a_setting_name(parts: list[str], bad: int) -> str:
    """A dotted `-c` key names settings; a map's own keys (a tag key, a label key) are given with
    the map, as JSON, where they may hold what a setting name may not ('.', ':', capitals)."""
    message = f"{parts[bad]!a} is not a setting name (a-z, 0-9 and _)"
    model: Any = Settings
    for depth, part in enumerate(parts[:bad]):
        field = model.model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            break
        annotation = field.annotation
        if get_origin(annotation) is dict:
            section = ".".join(parts[: depth + 1])
            return (
                f"{message}; give a key of {section} with the map, as JSON: -c {section}='{{...}}'"
            )
        model = next((arg for arg in (annotation, *get_args(annotation)) if _is_model(arg)), None)
    return message


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _parse_override(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        return load_yaml(value)
    return value


def _deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> None:
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _set_path(target: dict[str, Any], path: list[str], value: Any) -> None:
    for depth, part in enumerate(path[:-1]):
        if part in target and not isinstance(target[part], dict):
            raise ValueError(f"{'.'.join(path[: depth + 1])} is a single value, not a section")
        target = target.setdefault(part, {})
    target[path[-1]] = value
