"""Generates docs/configuration.md's reference from the Settings model (one source of truth).

`python -m tools.config_reference --write docs/configuration.md` rewrites the block between the
markers; tests/config/test_docs.py fails when the page and the model disagree.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from app_config.model import Settings

START = "<!-- config-reference:start -->"
END = "<!-- config-reference:end -->"


def _rows(
    model: type[BaseModel], prefix: str = "", defaults: BaseModel | None = None
) -> Iterator[tuple[str, str, str, str]]:
    """One row per leaf setting; a section's own default instance supplies its fields' defaults."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = field.annotation
        default = getattr(defaults, name) if defaults is not None else field.default
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if field.description:
                yield path, "section", "", field.description
            section_defaults = default if isinstance(default, BaseModel) else None
            yield from _rows(annotation, f"{path}.", section_defaults)
            continue
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        shown = extra["default_text"] if "default_text" in extra else _default(default)
        yield path, _type_name(annotation), shown, field.description or ""
        # The fields of a section that may be left out (X or null), or of each item of a list
        # of sections (path[].field): what a user writes inside it.
        nested = _inner_section(annotation)
        if nested is not None:
            inner, suffix = nested
            yield from _rows(inner, f"{path}{suffix}.")


def _inner_section(annotation: Any) -> tuple[type[BaseModel], str] | None:
    origin, args = get_origin(annotation), get_args(annotation)
    sections = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    if origin in (Union, UnionType) and len(sections) == 1:
        return sections[0], ""
    if origin is list and len(sections) == 1:
        return sections[0], "[]"
    return None


def _type_name(annotation: Any) -> str:
    """Readable types: list[IPv4Network], not the Annotated[...] validators behind them."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " or ".join(f"`{json.dumps(arg)}`" for arg in args)
    if origin in (Union, UnionType):
        return " or ".join(_type_name(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(arg) for arg in args)}]"
    return "null" if annotation is type(None) else annotation.__name__


def _default(value: Any) -> str:
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value, default=str)}`"


def render() -> str:
    lines = [START, "| setting | type | default | what it does |", "|---|---|---|---|"]
    for path, type_name, default, description in _rows(Settings):
        lines.append(f"| `{path}` | {type_name} | {default} | {description} |")
    lines.append(END)
    return "\n".join(lines)


def replace_block(text: str) -> str:
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    return before + render() + after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="Markdown page to update in place")
    args = parser.parse_args()
    if args.write:
        args.write.write_text(replace_block(args.write.read_text()))
    else:
        print(render())


if __name__ == "__main__":
    main()
