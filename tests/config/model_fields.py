"""Every setting of the model, found by walking it, with the `-c` override that puts a given
value into it: tests generated from this cover a field added tomorrow without a new line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from app_config import Settings
from app_config.section import _max_length


@dataclass(frozen=True)
class Leaf:
    """One setting that takes a value (not a section)."""

    path: str  # what a problem about it is named
    shape: str  # "scalar", "list" or "map": how a text reaches it
    unicode: bool  # its service takes Unicode letters
    max_length: int
    number: bool  # an int or float setting (optional or not)
    override: Callable[[Any], tuple[str, Any]]  # a value -> the `-c` key and value

    def __str__(self) -> str:
        return self.path


def leaves(model: type[BaseModel] = Settings, prefix: str = "") -> Iterator[Leaf]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = _unwrap(field.annotation)
        item = _list_item(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from leaves(annotation, f"{path}.")
        elif item is not None and issubclass(item, BaseModel):
            yield from _list_item_leaves(path, item)
        else:
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            shape = "list" if item is not None else "map" if _is_map(annotation) else "scalar"
            yield Leaf(
                path,
                shape,
                bool(extra.get("unicode")),
                _max_length(field),
                annotation in (int, float),
                _override(path, shape),
            )


def _list_item_leaves(path: str, item: type[BaseModel]) -> Iterator[Leaf]:
    """Settings inside list items (taints): named path[0].field, set as a one-item list."""
    for leaf in leaves(item):

        def override(value: Any, leaf: Leaf = leaf) -> tuple[str, Any]:
            _, inner = leaf.override(value)
            return path, json.dumps([{leaf.path: _decoded(inner)}])

        yield Leaf(
            f"{path}[0].{leaf.path}",
            leaf.shape,
            leaf.unicode,
            leaf.max_length,
            leaf.number,
            override,
        )


def _override(path: str, shape: str) -> Callable[[Any], tuple[str, Any]]:
    if shape == "list":
        return lambda value: (path, json.dumps([value]))
    if shape == "map":
        return lambda value: (path, json.dumps({"example": value}))
    return lambda value: (path, value)


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value[:1] in ("[", "{") else value


def _unwrap(annotation: Any) -> Any:
    """Optional[X] -> X, Annotated[X, ...] -> X."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, UnionType):
        options = [arg for arg in get_args(annotation) if arg is not NoneType]
        return _unwrap(options[0]) if len(options) == 1 else annotation
    return annotation


def _list_item(annotation: Any) -> Any:
    if get_origin(annotation) is list:
        item = _unwrap(get_args(annotation)[0])
        return item if isinstance(item, type) else str
    return None


def _is_map(annotation: Any) -> bool:
    return get_origin(annotation) is dict
