"""Writes catalog/vllm_engine_args.json: what the image's vLLM accepts in a Serve engine_kwargs.

Ray Serve LLM 2.58 (ray/llm/_internal/serve/engines/vllm/vllm_models.py, from_llm_config) sorts
each key of ``engine_kwargs`` into vLLM's ``FrontendArgs`` or ``AsyncEngineArgs`` by their
dataclass fields and raises "Unknown engine argument" for anything else, at replica start, on
the GPU nodes. The lists come from vLLM's own source, read without importing it (no torch):

- ``vllm/engine/arg_utils.py``: ``EngineArgs`` and ``AsyncEngineArgs`` fields;
- ``vllm/entrypoints/openai/cli_args.py``: ``BaseFrontendArgs`` (chat template, tool calling)
  and ``FrontendArgs`` (vLLM's own HTTP server: host, port, TLS, CORS), whose docstring says so;
- module-level ``Name = Literal[...]`` aliases the annotations name (``CacheDType``, ...), and
  the member names of the ``Enum`` classes they name (``AttentionBackendEnum``: vLLM parses
  ``AttentionBackendEnum[value.upper()]``, vllm/config/attention.py);
- ``vllm/tool_parsers/__init__.py`` and ``vllm/reasoning/__init__.py``: the parser names
  registered at import (``_TOOL_PARSERS_TO_REGISTER``, ``_REASONING_PARSERS_TO_REGISTER``).

Usage: ``python -m tools.vllm_engine_args <vllm wheel, or a directory holding vllm/>``; the
wheel is the one ``pip download vllm==<image's vLLM> --no-deps`` fetches.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent.parent / "catalog" / "vllm_engine_args.json"
ARG_UTILS = "vllm/engine/arg_utils.py"
CLI_ARGS = "vllm/entrypoints/openai/cli_args.py"
TOOL_PARSERS = "vllm/tool_parsers/__init__.py"
REASONING_PARSERS = "vllm/reasoning/__init__.py"
_VERSION = re.compile(r"^Version: (\S+)$", re.MULTILINE)


class Source:
    """The vLLM package's Python files, from a wheel or a directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_file():
            archive = zipfile.ZipFile(path)
            names = [n for n in archive.namelist() if n.startswith("vllm/") and n.endswith(".py")]
            self._read: Callable[[str], str] = lambda name: archive.read(name).decode()
            metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            self.version = _VERSION.search(archive.read(metadata).decode())[1]
        else:
            names = [str(p.relative_to(path)) for p in (path / "vllm").rglob("*.py") if p.is_file()]
            self._read = lambda name: (path / name).read_text()
            self.version = _directory_version(path)
        self.names = sorted(names)

    def tree(self, name: str) -> ast.Module:
        return ast.parse(self._read(name))

    def trees(self) -> Iterator[ast.Module]:
        for name in self.names:
            try:
                yield self.tree(name)
            except SyntaxError:  # a file for another Python version; holds no aliases we need
                continue


def _directory_version(path: Path) -> str:
    for metadata in path.glob("vllm-*.dist-info/METADATA"):
        return _VERSION.search(metadata.read_text())[1]
    version_file = path / "vllm" / "_version.py"
    match = re.search(r"version = [^'\"]*['\"]([^'\"]+)", version_file.read_text())
    return match[1]


def dataclass_fields(tree: ast.Module, name: str) -> dict[str, str]:
    """Annotated class-body fields (what ``dataclasses.fields`` returns), annotation as text."""
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return {
        node.target.id: ast.unparse(node.annotation).strip("'\"")
        for node in cls.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and "ClassVar" not in ast.unparse(node.annotation)
    }


def literal_aliases(source: Source) -> dict[str, list[Any]]:
    """``Name = Literal[...]`` anywhere in vLLM, nested aliases expanded."""
    raw: dict[str, list[ast.expr]] = {}
    for tree in source.trees():
        for node in tree.body:
            target, value = _assignment(node)
            if target and _is_literal(value):
                items = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
                raw.setdefault(target, items)

    def expand(items: list[ast.expr], seen: frozenset[str]) -> list[Any]:
        values: list[Any] = []
        for item in items:
            if isinstance(item, ast.Constant):
                values.append(item.value)
            elif isinstance(item, ast.Name) and item.id in raw and item.id not in seen:
                values.extend(expand(raw[item.id], seen | {item.id}))
        return values

    return {name: expand(items, frozenset({name})) for name, items in sorted(raw.items())}


def enum_members(source: Source) -> dict[str, dict[str, Any]]:
    """Members of every ``class Name(Enum)`` (or ``StrEnum``/``IntEnum``) in vLLM: name ->
    value where the value is a constant (a class path, "triton", 2), else None."""
    found: dict[str, dict[str, Any]] = {}
    for tree in source.trees():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith("Enum") for base in node.bases
            ):
                members = {
                    target.id: (
                        statement.value.value if isinstance(statement.value, ast.Constant) else None
                    )
                    for statement in node.body
                    if isinstance(statement, ast.Assign)
                    for target in statement.targets
                    if isinstance(target, ast.Name) and not target.id.startswith("_")
                }
                found.setdefault(node.name, members)
    return found


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return (target.id if isinstance(target, ast.Name) else None), node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


def _is_literal(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Subscript) and ast.unparse(value.value).endswith("Literal")


def registered_names(tree: ast.Module, variable: str) -> list[str]:
    for node in tree.body:
        target, value = _assignment(node)
        if target == variable and isinstance(value, ast.Dict):
            return sorted(key.value for key in value.keys if isinstance(key, ast.Constant))
    raise LookupError(f"{variable} not found")


def referenced_aliases(annotations: list[str], aliases: dict[str, list[Any]]) -> set[str]:
    words = {w for text in annotations for w in re.findall(r"[A-Za-z_]\w*", text)}
    return words & aliases.keys()


def generate(path: Path) -> dict[str, Any]:
    source = Source(path)
    arg_utils, cli_args = source.tree(ARG_UTILS), source.tree(CLI_ARGS)
    engine = {**dataclass_fields(arg_utils, "EngineArgs")}
    engine.update(dataclass_fields(arg_utils, "AsyncEngineArgs"))
    frontend = dataclass_fields(cli_args, "BaseFrontendArgs")
    server = {
        k: v for k, v in dataclass_fields(cli_args, "FrontendArgs").items() if k not in frontend
    }
    annotations = [*engine.values(), *frontend.values()]
    aliases = literal_aliases(source)
    used = referenced_aliases(annotations, aliases)
    enums = enum_members(source)
    used_enums = referenced_aliases(annotations, enums)
    return {
        "vllm_version": source.version,
        "generated_by": "tools/vllm_engine_args.py",
        "engine_args": dict(sorted(engine.items())),
        "frontend_args": dict(sorted(frontend.items())),
        "server_args": dict(sorted(server.items())),
        "literals": {name: aliases[name] for name in sorted(used)},
        "enums": {name: enums[name] for name in sorted(used_enums)},
        "tool_call_parsers": registered_names(
            source.tree(TOOL_PARSERS), "_TOOL_PARSERS_TO_REGISTER"
        ),
        "reasoning_parsers": registered_names(
            source.tree(REASONING_PARSERS), "_REASONING_PARSERS_TO_REGISTER"
        ),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit(__doc__)
    OUTPUT.write_text(render(generate(Path(argv[0]))))
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
