"""Configuration errors that read as instructions, never as stack traces."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ValidationError


class Severity(StrEnum):
    """An error stops synth before any construct exists; a warning is printed by `cdk synth`
    (and fails `cdk synth --strict`) unless the configuration acknowledges it."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One thing a rule found in the configuration: where, what was given, what is wrong and
    what would be valid, under a stable code (a warning is acknowledged by it)."""

    path: str
    message: str
    value: Any = None
    code: str = "invalid"
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        """One line: the setting, the value as typed (escaped, so an invisible or look-alike
        character shows), what is wrong and what would be valid."""
        path = self.path if self.path.isascii() and self.path.isprintable() else ascii(self.path)
        shown = "" if self.value is None else f" = {_short_repr(self.value)}"
        return " ".join(f"{path}{shown}: {self.message}".split())


# An error finding: what validation reports (the name the rest of the code grew up with).
Problem = Finding


class ConfigError(Exception):
    """Raised before any construct is built. Deliberately not a ValueError: pydantic would wrap
    a ValueError raised from a model validator and lose the per-setting paths."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        if len(problems) == 1:
            super().__init__(f"Invalid configuration: {problems[0]}")
            return
        lines = [f"Invalid configuration ({len(problems)} problems):"]
        lines += [f"  - {problem}" for problem in problems]
        super().__init__("\n".join(lines))


def problems_from_validation_error(error: ValidationError, model: type[BaseModel]) -> list[Problem]:
    """Translate pydantic's errors into Problems with dotted paths and the valid alternatives."""
    problems = []
    for detail in error.errors(include_url=False):
        path = _dotted(detail["loc"])
        if detail["type"] == "extra_forbidden":
            known = ", ".join(_field_names_at(model, detail["loc"][:-1])) or "none"
            problems.append(
                Problem(path, f"unknown setting; valid settings here: {known}", code="unknown")
            )
        elif detail["type"] == "missing":
            problems.append(Problem(path, "required setting is missing", code="missing"))
        elif detail["type"] == "string_pattern_mismatch":
            rule = _rule_at(model, detail["loc"]) or detail["msg"]
            problems.append(Problem(path, rule, detail.get("input"), code=detail["type"]))
        elif detail.get("input", ...) is None and _model_at(model, detail["loc"]) is not None:
            problems.append(Problem(
                path,
                "is empty (a key with no value, as a truncated file leaves it): give its "
                "settings, or remove the key for the defaults",
                code="empty-section",
            ))  # fmt: skip
        else:
            message = detail["msg"].removeprefix("Value error, ")
            # A whole section's value says less than the message, which names its settings.
            is_section = _model_at(model, detail["loc"]) is not None
            value = None if is_section else detail.get("input")
            if _number_for_text(detail):
                zeros = (
                    ", which drops trailing zeros (1.10 is 1.1)" if isinstance(value, float) else ""
                )
                message += (
                    f"; YAML and JSON read it unquoted as a number{zeros}: quote the text as "
                    "you mean it"
                )
            problems.append(Problem(path, message, value, code=detail["type"]))
    return problems


def _number_for_text(detail: Any) -> bool:
    """A number where the setting takes text: a version written unquoted (`1.35`) is a float
    to YAML, and pydantic then shows it refused by the very value it reads as."""
    value = detail.get("input")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    if detail["type"] == "string_type":
        return True
    expected = (detail.get("ctx") or {}).get("expected", "")
    return detail["type"] == "literal_error" and "'" in expected


def _dotted(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":  # pydantic's marker for a failing dict key
            path += " (key)"
        else:
            path += f".{part}" if path else str(part)
    return path or "(root)"


def _rule_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """The rule in words that a pattern field carries (``json_schema_extra={"rule": ...}``), so
    a message never only quotes a regular expression."""
    *parents, name = [part for part in loc if isinstance(part, str)]
    fields = _field_names_at(model, tuple(parents))
    if name not in fields:
        return None
    holder = _model_at(model, tuple(parents))
    extra = holder.model_fields[name].json_schema_extra if holder else None
    return extra.get("rule") if isinstance(extra, dict) else None


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    current: Any = model
    for part in loc:
        field = current.model_fields.get(part) if isinstance(current, type) else None
        if field is None:
            return None
        current = field.annotation
        for arg in getattr(current, "__args__", ()) or ():
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                current = arg
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _field_names_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Field names of the nested model at ``loc``, for 'did you mean' style messages."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = field.annotation
        for arg in getattr(current, "__args__", ()) or ():  # Optional[...] / dict[str, Model]
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                current = arg
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return []


def _short_repr(value: Any, limit: int = 80) -> str:
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
