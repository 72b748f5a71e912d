"""Any value of any shape at any setting, section or not, ends in a Settings or a ConfigError:
never another exception, which would reach the user as a stack trace."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from app_config import ConfigError, Settings, load_settings
from tests.config.model_fields import leaves
from tests.configurations import cdk_json_context

SHAPES: list[Any] = [
    None, 0, -1, 2**64, 1.5, True, "", "x", "[", "{", "[]", "{}", [], {}, [None], [[]],
    {"": ""}, {"a": None}, {"a": {"b": [1]}}, [{"key": None}], "null", "~",
]  # fmt: skip


def _section_paths(model: type[BaseModel] = Settings, prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths.append(f"{prefix}{name}")
            paths += _section_paths(annotation, f"{prefix}{name}.")
    return paths


PATHS = _section_paths() + [leaf.path for leaf in leaves() if "[0]." not in leaf.path]


def _outcome(context: dict[str, Any]) -> list[str]:
    """The problems as printed, or [] when the configuration is valid; any other exception
    propagates and fails the test."""
    try:
        load_settings({**cdk_json_context(), **context}, {})
    except ConfigError as error:
        return [str(problem) for problem in error.problems] or ["(no problem listed)"]
    return []


@pytest.mark.parametrize("path", PATHS)
def test_any_shape_at_any_setting_is_a_config_error_or_settings(path: str) -> None:
    for value in SHAPES:
        problems = _outcome({path: value})
        assert "(no problem listed)" not in problems
        assert all("\n" not in problem for problem in problems)


@pytest.mark.parametrize("value", SHAPES)
def test_any_shape_as_the_whole_settings_or_a_config_file_path(value: Any) -> None:
    for key in ("settings", "config"):
        _outcome({key: value})
