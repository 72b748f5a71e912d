"""Builds Settings from CDK context: cdk.json, then a YAML file, then `-c` overrides.

Precedence, lowest first:
1. ``settings`` in cdk.json (the defaults that synthesize);
2. the YAML file named by ``-c config=path/to/file.yaml`` (same shape as ``settings``);
3. ``-c section.key=value`` for any setting (``-c network.nat_gateways=2``); values that start
   with ``[`` or ``{`` are parsed as JSON/YAML, other strings are coerced by the model.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from app_config.errors import ConfigError, Problem, problems_from_validation_error
from app_config.model import Settings

SETTINGS_KEY = "settings"
CONFIG_FILE_KEY = "config"
# Context keys that belong to CDK itself: feature flags start with '@', the CLI's own
# (aws:cdk:version-reporting, ...) and cached lookups (availability-zones:account=...) contain
# ':', and `cdk acknowledge` writes this one. Every other key is ours, and must be known.
CDK_CONTEXT_KEYS = frozenset({"acknowledged-issue-numbers"})


def load_settings(context: Mapping[str, Any], environ: Mapping[str, str] = os.environ) -> Settings:
    """Validate the whole configuration, or raise ConfigError listing every problem found."""
    unknown = [Problem(key, _unknown_key_message(key)) for key in context if _is_unknown(key)]
    if unknown:
        raise ConfigError(unknown)
    base = context.get(SETTINGS_KEY) or {}
    if not isinstance(base, Mapping):
        raise ConfigError([Problem(SETTINGS_KEY, "must be a mapping of settings", base)])
    raw = copy.deepcopy(dict(base))
    if CONFIG_FILE_KEY in context:
        _deep_merge(raw, _read_yaml(str(context[CONFIG_FILE_KEY])))
    for key, value in context.items():
        if _is_setting_override(key):
            _set_path(raw, key.split("."), _parse_override(value))
    if "account" not in raw and environ.get("CDK_DEFAULT_ACCOUNT"):
        raw["account"] = environ["CDK_DEFAULT_ACCOUNT"]
    try:
        return Settings.model_validate(with_section_defaults(Settings, raw))
    except ValidationError as error:
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


def _is_unknown(key: str) -> bool:
    return not (
        key in (SETTINGS_KEY, CONFIG_FILE_KEY)
        or key in CDK_CONTEXT_KEYS
        or ":" in key
        or key.startswith("@")
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
    if key in (SETTINGS_KEY, CONFIG_FILE_KEY) or ":" in key or key.startswith("@"):
        return False
    return "." in key or key in Settings.model_fields


def _parse_override(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        return yaml.safe_load(value)
    return value


def _read_yaml(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            [
                Problem(
                    CONFIG_FILE_KEY,
                    "no such file (paths are relative to the directory cdk runs in)",
                    path,
                )
            ]
        )
    try:
        loaded = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError([Problem(CONFIG_FILE_KEY, f"not valid YAML: {error}", path)]) from None
    if not isinstance(loaded, dict):
        raise ConfigError([Problem(CONFIG_FILE_KEY, "must hold a mapping of settings", path)])
    return loaded


def _deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> None:
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _set_path(target: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        if not isinstance(target.get(part), dict):
            target[part] = {}
        target = target[part]
    target[path[-1]] = value
