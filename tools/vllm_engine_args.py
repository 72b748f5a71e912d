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

What each argument accepts as a value (``values``), so a wrong value fails at synth and not at
replica start (app_config/rules/engine_options.py judges it):

- ``types``: the kinds of its annotation's alternatives (int, float, bool, str, none, list, dict,
  choice, config for a nested vLLM config class, class for ``type[...]``);
- ``choices``: the ``Literal`` values and enum members the annotation names, with where they
  are declared, or, for an argument annotated as plain text, those of the config field it
  becomes (the pydantic config class validates the value); an enum that a config's
  ``mode="before"`` validator parses as ``Enum[value.upper()]`` (vllm/config/attention.py
  ``AttentionConfig.validate_backend_before``) is given by member name, case-insensitively,
  plus ``"auto"`` where that validator maps it to None;
- ``bounds``: the ``Field(gt=, ge=, lt=, le=)`` limits of the pydantic config dataclass field the
  argument becomes (vllm/config/*.py), found from ``EngineArgs``'s defaults
  (``CacheConfig.gpu_memory_utilization``, ``get_field(ParallelConfig, "eplb_config")``) and the
  ``SchedulerConfig(max_num_seqs=self.max_num_seqs, ...)`` calls of ``create_engine_config``.

Which arguments vLLM refuses together, and which values it refuses unless told to take them:

- ``exclusive``: an argument beside the same field of the nested config argument it overrides,
  read from ``EngineArgs``'s methods (``exclusive_options``: ``attention_backend`` against
  ``attention_config.backend`` in ``create_engine_config``, ``spec_tokens`` against
  ``speculative_config["num_speculative_tokens"]`` in ``create_speculative_config``);
- ``config_class``, ``fields``, ``field_bounds``, ``field_values``, ``dashes_in_keys`` (in
  ``values``): the vLLM config class a nested config argument becomes (its annotation, or
  ``Config(**self.arg)``), its ``__init__`` keywords (with its bases'), their ``Field`` bounds,
  what each takes by its annotation (``nested_rule``), and whether vLLM reads '-' in its keys as
  '_' first;
- ``deprecated_quantization``: ``DEPRECATED_QUANTIZATION_METHODS``
  (vllm/model_executor/layers/quantization/__init__.py), which ``ModelConfig`` refuses without
  ``allow_deprecated_quantization``;
- ``quantization``: what each method needs from the checkpoint when its config.json has no
  quantization config (tools/vllm_quantization.py).

Usage: ``python -m tools.vllm_engine_args <vllm wheel, or a directory holding vllm/>``; the
wheel is the one ``pip download vllm==<image's vLLM> --no-deps`` fetches (or the e2e venv's
site-packages, ``$(python -m tools.e2e_requirements venv)/lib/python3.*/site-packages``). The
output is catalog/vllm_engine_args.json; `make e2e` checks that it is what the installed vLLM
generates (tests/e2e/test_engine_options.py).
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from tools.vllm_quantization import quantization_methods

OUTPUT = Path(__file__).resolve().parent.parent / "catalog" / "vllm_engine_args.json"
ARG_UTILS = "vllm/engine/arg_utils.py"
CLI_ARGS = "vllm/entrypoints/openai/cli_args.py"
TOOL_PARSERS = "vllm/tool_parsers/__init__.py"
REASONING_PARSERS = "vllm/reasoning/__init__.py"
QUANTIZATION = "vllm/model_executor/layers/quantization/__init__.py"
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
        self._texts: dict[str, str] = {}
        self._trees: dict[str, ast.Module] = {}

    def text(self, name: str) -> str:
        if name not in self._texts:
            self._texts[name] = self._read(name)
        return self._texts[name]

    def tree(self, name: str) -> ast.Module:
        if name not in self._trees:  # every pass reads the same files
            self._trees[name] = ast.parse(self.text(name))
        return self._trees[name]

    def trees(self, mentioning: tuple[str, ...] = ()) -> Iterator[ast.Module]:
        for _, tree in self.named_trees(mentioning=mentioning):
            yield tree

    def named_trees(
        self, under: str = "vllm/", mentioning: tuple[str, ...] = ()
    ) -> Iterator[tuple[str, ast.Module]]:
        """The files under ``under``, parsed; with ``mentioning``, only those whose text has one
        of the words: a pass that looks for a node naming a word (``Literal``, ``Enum``) skips
        the files that cannot hold it unparsed (parsing all ~2,200 of vLLM 0.26's files took
        most of a run: 20 s of CPU)."""
        for name in self.names:
            if not name.startswith(under):
                continue
            if mentioning and not any(word in self.text(name) for word in mentioning):
                continue
            try:
                yield name, self.tree(name)
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
    for tree in source.trees(mentioning=("Literal",)):
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
    for tree in source.trees(mentioning=("Enum",)):
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


CONFIG_FILES = "vllm/config/"
_BOUNDS = ("gt", "ge", "lt", "le")


def declarations(source: Source) -> dict[str, str]:
    """Where each module-level ``Literal`` alias and ``Enum`` class is declared (first seen)."""
    found: dict[str, str] = {}
    for name, tree in source.named_trees(mentioning=("Literal", "Enum")):
        for node in tree.body:
            target, value = _assignment(node)
            if target and _is_literal(value):
                found.setdefault(target, name)
            elif isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith("Enum") for base in node.bases
            ):
                found.setdefault(node.name, name)
    return found


def config_fields(source: Source) -> dict[str, dict[str, dict[str, Any]]]:
    """Every class of vllm/config/*.py: field -> its annotation, its ``Field(...)`` bounds, the
    file, and whether the class's ``__init__`` takes it."""
    classes: dict[str, dict[str, dict[str, Any]]] = {}
    for name, tree in source.named_trees(CONFIG_FILES):
        for cls in tree.body:
            if not isinstance(cls, ast.ClassDef) or cls.name in classes:
                continue
            fields: dict[str, dict[str, Any]] = {}
            # A before-validator rewrites the value pydantic reads: the annotation alone does not
            # say what the field takes. vLLM's wrap-validator ``_skip_none_validation`` lets an
            # explicit null through unvalidated (pydantic refuses it for ``x: int = None``).
            rewritten = _validated_fields(cls, "before")
            none_skipped = _validated_fields(cls, "wrap", "_skip_none_validation")
            for node in cls.body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                bounds: dict[str, Any] = {}
                value = node.value
                if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("Field"):
                    for keyword in value.keywords:
                        if keyword.arg in _BOUNDS:
                            bounds[keyword.arg] = ast.literal_eval(keyword.value)
                keywords = value.keywords if isinstance(value, ast.Call) else []
                fields[node.target.id] = {
                    "annotation": ast.unparse(node.annotation),
                    "bounds": bounds,
                    "file": name,
                    "before": bool({node.target.id, "*"} & rewritten),
                    "none_skipped": bool({node.target.id, "*"} & none_skipped),
                    # A keyword of the class's __init__: not field(init=False), not a ClassVar.
                    "init": "ClassVar" not in ast.unparse(node.annotation)
                    and not any(
                        k.arg == "init" and ast.unparse(k.value) == "False" for k in keywords
                    ),
                }
            classes[cls.name] = fields
    return classes


def _validated_fields(cls: ast.ClassDef, mode: str, function: str | None = None) -> set[str]:
    """Fields a ``@field_validator(..., mode=mode)`` of the class names (``"*"``: every
    field), optionally only those of the validator named ``function``."""
    found: set[str] = set()
    for node in cls.body:
        if not isinstance(node, ast.FunctionDef) or function not in (None, node.name):
            continue
        for decorator in node.decorator_list:
            if (
                isinstance(decorator, ast.Call)
                and ast.unparse(decorator.func).endswith("field_validator")
                and any(
                    k.arg == "mode" and ast.unparse(k.value) == repr(mode)
                    for k in decorator.keywords
                )
            ):
                found |= {
                    arg.value
                    for arg in decorator.args
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                }
    return found


def config_targets(tree: ast.Module, classes: set[str]) -> dict[str, list[tuple[str, str]]]:
    """Engine argument -> the (config class, field) it becomes: ``EngineArgs``'s defaults
    (``x: T = CacheConfig.x``, ``get_field(ParallelConfig, "x")``) and the keywords
    ``Config(field=self.arg)`` of ``create_engine_config`` and its helpers."""
    targets: dict[str, list[tuple[str, str]]] = {}

    def add(arg: str, cls: str, field: str) -> None:
        if cls in classes and (cls, field) not in targets.get(arg, []):
            targets.setdefault(arg, []).append((cls, field))

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in ("EngineArgs", "AsyncEngineArgs"):
            for statement in node.body:
                if not (
                    isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                ):
                    continue
                default = statement.value
                if isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name):
                    add(statement.target.id, default.value.id, default.attr)
                elif (
                    isinstance(default, ast.Call)
                    and ast.unparse(default.func) == "get_field"
                    and len(default.args) == 2
                    and isinstance(default.args[0], ast.Name)
                    and isinstance(default.args[1], ast.Constant)
                ):
                    add(statement.target.id, default.args[0].id, default.args[1].value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            for keyword in node.keywords:
                value = keyword.value
                if (
                    keyword.arg
                    and isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id == "self"
                ):
                    add(value.attr, node.func.id, keyword.arg)
    return targets


def enums_by_name(source: Source, enums: Mapping[str, Any]) -> dict[str, list[str]]:
    """Enums a config's ``mode="before"`` validator looks up as ``Enum[value.upper()]``: given by
    member name, any case; with the extra words the validator compares ``value.lower()`` to
    (``"auto"``, which means vLLM picks)."""
    found: dict[str, list[str]] = {}
    for _, tree in source.named_trees(CONFIG_FILES):
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            # A name bound to ``value.upper()`` earlier (``mode_name = value.upper()``,
            # CompilationConfig.validate_mode_before) is the same lookup.
            upper_names = {
                target.id
                for node in ast.walk(function)
                if isinstance(node, ast.Assign) and "upper()" in ast.unparse(node.value)
                for target in node.targets
                if isinstance(target, ast.Name)
            }
            looked_up = {
                node.value.id
                for node in ast.walk(function)
                if isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Name)
                and node.value.id in enums
                and (
                    "upper()" in ast.unparse(node.slice)
                    or (isinstance(node.slice, ast.Name) and node.slice.id in upper_names)
                )
            }
            words = [
                comparator.value
                for node in ast.walk(function)
                if isinstance(node, ast.Compare) and "lower()" in ast.unparse(node.left)
                for comparator in node.comparators
                if isinstance(comparator, ast.Constant) and isinstance(comparator.value, str)
            ]
            for enum in looked_up:
                found.setdefault(enum, [])
                found[enum] += [w for w in words if w not in found[enum]]
    return found


def alternatives(annotation: str) -> list[str]:
    """Top-level members of a ``A | B[C | D] | None`` union, and of ``Optional[...]``."""
    parts, depth, current = [], 0, ""
    for char in annotation:
        depth += char == "["
        depth -= char == "]"
        if char == "|" and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    expanded = []
    for part in parts:
        if part.startswith("Optional[") and part.endswith("]"):
            expanded += [*alternatives(part[len("Optional[") : -1]), "None"]
        else:
            expanded.append(part)
    return expanded


_KINDS = {"bool": "bool", "int": "int", "float": "float", "str": "str", "None": "none"}


def value_rule(
    annotation: str,
    literals: Mapping[str, list[Any]],
    enums: Mapping[str, dict[str, Any]],
    by_name: Mapping[str, list[str]],
    declared: Mapping[str, str],
    configs: set[str],
) -> dict[str, Any]:
    """What vLLM takes for one annotation: its kinds and, for a Literal or enum, the choices."""
    types: list[str] = []
    choices: list[Any] = []
    sources: list[str] = []
    case_insensitive = False
    for kind in alternatives(annotation):
        if kind in _KINDS:
            found = _KINDS[kind]
        elif kind.startswith("Literal["):
            found = "choice"
            choices += list(ast.literal_eval(f"({kind[len('Literal[') : -1]},)"))
        elif kind in literals:
            found = "choice"
            choices += literals[kind]
            sources.append(f"{kind} ({declared[kind]})")
        elif kind in enums:
            found = "choice"
            sources.append(f"{kind} ({declared[kind]})")
            if kind in by_name:
                choices += [*enums[kind], *by_name[kind]]
                case_insensitive = True
            else:
                choices += [*(v for v in enums[kind].values() if v is not None), *enums[kind]]
        elif kind.startswith(("list", "set", "tuple")):
            found = "list"
        elif kind.startswith("dict"):
            found = "dict"
        elif kind.startswith("type["):
            found = "class"
        elif kind in configs:
            found = "config"
        else:
            found = "object"  # a class vLLM builds itself (a callable, a tokenizer)
        if found not in types:
            types.append(found)
    rule: dict[str, Any] = {"types": types}
    if choices:
        rule["choices"] = list(dict.fromkeys(choices))
        rule["choices_from"] = sources or ["the annotation's Literal"]
        if case_insensitive:
            rule["case_insensitive"] = True
    return rule


def _narrowed(
    rule: dict[str, Any],
    fields: list[tuple[str, str, dict[str, Any]]],
    rule_of: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """An argument typed as plain text whose config field is a ``Literal`` or an enum takes the
    field's choices: the pydantic config class refuses any other value when
    ``create_engine_config`` builds it (``offload_backend: str = OffloadConfig.offload_backend``,
    whose field is ``OffloadBackend``). A None the argument allows stays allowed."""
    if "choices" in rule or not set(rule["types"]) <= {"str", "none"}:
        return rule
    for cls, attribute, field in fields:
        narrow = rule_of(field["annotation"])
        if "choices" in narrow:
            types = narrow["types"] + [t for t in rule["types"] if t == "none"]
            sources = [f"{source}, {cls}.{attribute}" for source in narrow["choices_from"]]
            return {**narrow, "types": list(dict.fromkeys(types)), "choices_from": sources}
    return rule


def value_rules(
    source: Source,
    arguments: Mapping[str, str],
    arg_utils: ast.Module,
    literals: Mapping[str, list[Any]],
    enums: Mapping[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    classes = config_fields(source)
    declared = declarations(source)
    by_name = enums_by_name(source, enums)
    targets = config_targets(arg_utils, set(classes))
    shapes = config_shapes(source)
    splats = splatted_configs(arg_utils, set(classes))
    rules: dict[str, dict[str, Any]] = {}
    config_names = set(classes)

    def rule_of(annotation: str) -> dict[str, Any]:
        return value_rule(annotation, literals, enums, by_name, declared, config_names)

    for name, annotation in sorted(arguments.items()):
        rule = rule_of(annotation)
        fields = [
            (cls, attribute, field)
            for cls, attribute in targets.get(name, [])
            if (field := classes[cls].get(attribute))
        ]
        rule = _narrowed(rule, fields, rule_of)
        bounds = [
            {**field["bounds"], "source": f"{field['file']} {cls}.{attribute}"}
            for cls, attribute in targets.get(name, [])
            if (field := classes[cls].get(attribute)) and field["bounds"]
        ]
        if bounds:
            rule["bounds"] = bounds
        nested = _nested_config(annotation, classes) if "config" in rule["types"] else None
        splatted = None if nested else splats.get(name)
        if nested or splatted:
            rule.update(
                nested_rule(
                    nested or splatted,
                    annotation,
                    classes,
                    shapes,
                    lambda field: field_value_rule(field, rule_of, enums, by_name),
                    splatted=splatted is not None,
                )
            )
            if dashed_keys(arg_utils, name):
                rule["dashes_in_keys"] = True
        rules[name] = rule
    return rules


# The kinds whose values a nested field's rule can judge; a field of a nested config class, a
# class or an object vLLM builds itself is left to vLLM (`make e2e` builds the configs).
_JUDGED_KINDS = {"bool", "int", "float", "str", "none", "list", "dict", "choice"}


def field_value_rule(
    field: dict[str, Any],
    rule_of: Callable[[str], dict[str, Any]],
    enums: Mapping[str, dict[str, Any]],
    by_name: Mapping[str, list[str]],
) -> dict[str, Any] | None:
    """What a field of a nested config class takes, where its annotation says it: None for a
    field a ``mode="before"`` validator rewrites (unless that validator is the by-name enum
    lookup ``enums_by_name`` reads, whose members it then takes by name, any case, or by value)
    and for kinds not judged here."""
    rule = rule_of(field["annotation"])
    named = [kind for kind in alternatives(field["annotation"]) if kind in by_name]
    if field["before"] and not named:
        return None
    if not set(rule["types"]) <= _JUDGED_KINDS:
        return None
    if field["none_skipped"] and "none" not in rule["types"]:
        rule["types"].append("none")
    for kind in named:  # a value that is not text goes to pydantic's enum: by its value
        values = [v for v in enums[kind].values() if v is not None and not isinstance(v, str)]
        rule["choices"] = list(dict.fromkeys([*rule.get("choices", []), *values]))
    return rule


def config_shapes(source: Source) -> dict[str, dict[str, Any]]:
    """Every class of vllm/config/*.py: its file, its base classes, and whether a
    ``model_validator(mode="before")`` may rewrite the mapping before pydantic reads it."""
    shapes: dict[str, dict[str, Any]] = {}
    for name, tree in source.named_trees(CONFIG_FILES):
        for cls in tree.body:
            if isinstance(cls, ast.ClassDef) and cls.name not in shapes:
                decorators = [
                    ast.unparse(d) for n in cls.body if isinstance(n, ast.FunctionDef)
                    for d in n.decorator_list
                ]  # fmt: skip
                shapes[cls.name] = {
                    "file": name,
                    "bases": [ast.unparse(base) for base in cls.bases],
                    "before": any(
                        d.startswith("model_validator") and "before" in d for d in decorators
                    ),
                }
    return shapes


def splatted_configs(tree: ast.Module, classes: set[str]) -> dict[str, str]:
    """Engine argument -> the config class built from it as keywords, ``Config(**self.arg)``
    (``SpeculativeConfig(**self.speculative_config)``, vllm/engine/arg_utils.py)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            for keyword in node.keywords:
                argument = _self_attribute(keyword.value) if keyword.arg is None else None
                if argument and node.func.id in classes:
                    found.setdefault(argument, node.func.id)
    return found


def dashed_keys(tree: ast.Module, argument: str) -> bool:
    """Whether vLLM turns '-' into '_' in the argument's keys before it builds the config
    (``{k.replace("-", "_"): v for k, v in self.speculative_config.items()}``)."""
    return any(
        isinstance(node, ast.DictComp)
        and f"self.{argument}.items()" in ast.unparse(node)
        and "replace('-', '_')" in ast.unparse(node.key)
        for node in ast.walk(tree)
    )


def _nested_config(annotation: str, classes: Mapping[str, Any]) -> str | None:
    return next((kind for kind in alternatives(annotation) if kind in classes), None)


def nested_rule(
    cls: str,
    annotation: str,
    classes: Mapping[str, dict[str, dict[str, Any]]],
    shapes: Mapping[str, dict[str, Any]],
    field_rule: Callable[[dict[str, Any]], dict[str, Any] | None],
    splatted: bool = False,
) -> dict[str, Any]:
    """What vLLM's config class takes as the mapping of a nested config argument: its field
    names, where every key is one (vLLM's ``@config`` dataclasses forbid extra fields, vllm/
    config/utils.py; not where the argument also takes a plain dict, which vLLM may read
    otherwise, unless it is splatted into the class as keywords, ``SpeculativeConfig(**self.
    speculative_config)``; nor where a ``mode="before"`` validator may rewrite it), the
    ``Field`` bounds of each field (``ProfilerConfig.active_iterations >= 1``,
    ``SpeculativeConfig.num_speculative_tokens > 0``) and what each field takes by its
    annotation (``field_values``: ``CompilationConfig.cudagraph_mode`` a ``CUDAGraphMode`` by
    name, ``StructuredOutputsConfig.backend`` one of its ``Literal``)."""
    fields: dict[str, tuple[str, dict[str, Any]]] = {}
    pending, seen = [cls], set()
    while pending:  # the class and its bases within vllm/config
        current = pending.pop()
        if current in seen or current not in classes:
            continue
        seen.add(current)
        for field, declared in classes[current].items():
            fields.setdefault(field, (current, declared))
        pending += shapes[current]["bases"]
    rule: dict[str, Any] = {"config_class": f"{shapes[cls]['file']} {cls}"}
    whole = splatted or "dict" not in [
        alternative.split("[")[0] for alternative in alternatives(annotation)
    ]
    rewritten = any(shapes[c]["before"] for c in seen)
    if whole and not rewritten:
        rule["fields"] = sorted(
            field for field, (_, declared) in fields.items() if declared["init"]
        )
    values = {
        field: {**judged, "source": f"{declared['file']} {owner}.{field}"}
        for field, (owner, declared) in sorted(fields.items())
        if declared["init"] and not rewritten and (judged := field_rule(declared))
    }
    if values:
        rule["field_values"] = values
    bounds = {
        field: {**declared["bounds"], "source": f"{declared['file']} {owner}.{field}"}
        for field, (owner, declared) in sorted(fields.items())
        if declared["bounds"]
    }
    if bounds:
        rule["field_bounds"] = bounds
    return rule


def _copied_configs(function: ast.FunctionDef) -> dict[str, str]:
    """``name = copy.deepcopy(self.config)`` in ``function``: local name -> the argument."""
    found: dict[str, str] = {}
    for node in ast.walk(function):
        target, value = _assignment(node) if isinstance(node, ast.stmt) else (None, None)
        if (
            target
            and isinstance(value, ast.Call)
            and ast.unparse(value.func).endswith("deepcopy")
            and value.args
            and isinstance(value.args[0], ast.Attribute)
            and ast.unparse(value.args[0].value) == "self"
        ):
            found[target] = value.args[0].attr
    return found


def _self_attribute(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self":
        return node.attr
    return None


def _raises(statements: list[ast.stmt]) -> bool:
    return any(isinstance(node, ast.Raise) for node in statements)


def exclusive_options(
    arg_utils: ast.Module,
    engine: Mapping[str, str],
    classes: Mapping[str, dict[str, dict[str, Any]]],
    by_name: Mapping[str, list[str]],
) -> list[dict[str, Any]]:
    """Engine arguments that vLLM refuses beside the same field of a nested config argument
    (``EngineArgs`` methods, vllm/engine/arg_utils.py), in the two shapes its source has:

    - ``if self.attention_backend is not None:`` then, on ``attention_config =
      copy.deepcopy(self.attention_config)``, ``if attention_config.backend is not None:
      raise`` (``create_engine_config``): both set (``"nested": "set"``); a value the field's
      before-validator turns into None (``"auto"`` of an enum looked up by name) is unset;
    - ``for flag, key, value in (("--spec-method", "method", self.spec_method), ...)`` with
      ``if key in self.speculative_config: raise`` (``create_speculative_config``): the key
      present in the mapping at all (``"nested": "given"``).
    """
    found: list[dict[str, Any]] = []
    (engine_args,) = [
        n for n in arg_utils.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs"
    ]
    for function in engine_args.body:
        if not isinstance(function, ast.FunctionDef):
            continue
        source = f"{ARG_UTILS} EngineArgs.{function.name}"
        copies = _copied_configs(function)
        for outer in ast.walk(function):
            if not isinstance(outer, ast.If):
                continue
            option = _is_set(outer.test)
            if option is None:
                continue
            for inner in ast.walk(outer):
                if inner is outer or not isinstance(inner, ast.If) or not _raises(inner.body):
                    continue
                nested = _is_set(inner.test, local=True)
                if nested and "." in nested and nested.split(".")[0] in copies:
                    config, field = copies[nested.split(".")[0]], nested.split(".", 1)[1]
                    found.append({
                        "option": option, "config": config, "field": field, "nested": "set",
                        "unset": _unset_words(engine[config], field, classes, by_name),
                        "source": source,
                    })  # fmt: skip
        for loop in ast.walk(function):
            if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Tuple)):
                continue
            checks = [
                node
                for node in ast.walk(loop)
                if isinstance(node, ast.If)
                and _raises(node.body)
                and isinstance(node.test, ast.Compare)
                and isinstance(node.test.ops[0], ast.In)
            ]
            for check in checks:
                config = _self_attribute(check.test.comparators[0])
                for row in loop.iter.elts:
                    if not isinstance(row, ast.Tuple):
                        continue
                    keys = [
                        e.value
                        for e in row.elts
                        if isinstance(e, ast.Constant)
                        and isinstance(e.value, str)
                        and not e.value.startswith("-")  # the flag, "--spec-method"
                    ]
                    options = [a for e in row.elts if (a := _self_attribute(e))]
                    if config and len(keys) == 1 and len(options) == 1:
                        found.append({
                            "option": options[0], "config": config, "field": keys[0],
                            "nested": "given", "unset": [], "source": source,
                        })  # fmt: skip
    return found


def _unset_words(
    annotation: str,
    field: str,
    classes: Mapping[str, dict[str, dict[str, Any]]],
    by_name: Mapping[str, list[str]],
) -> list[str]:
    """The words the nested field's ``mode="before"`` validator turns into None (``"auto"``
    for an enum looked up by name): given there, the field is unset."""
    for cls in alternatives(annotation):
        declared = classes.get(cls, {}).get(field)
        if declared:
            enums = referenced_aliases([declared["annotation"]], by_name)
            return sorted({word for enum in enums for word in by_name[enum]})
    return []


def _is_set(test: ast.expr, *, local: bool = False) -> str | None:
    """``self.x is not None`` -> "x"; with ``local``, ``name.field is not None`` ->
    "name.field"."""
    if not (
        isinstance(test, ast.Compare)
        and isinstance(test.ops[0], ast.IsNot)
        and ast.unparse(test.comparators[0]) == "None"
    ):
        return None
    if local:
        text = ast.unparse(test.left)
        return None if text.startswith("self.") else text
    return _self_attribute(test.left)


def deprecated_quantization(source: Source) -> list[str]:
    """``DEPRECATED_QUANTIZATION_METHODS``: methods ``ModelConfig._verify_quantization``
    (vllm/config/model.py) refuses unless ``allow_deprecated_quantization`` is set."""
    tree = source.tree(QUANTIZATION)
    for node in tree.body:
        target, value = _assignment(node)
        if target == "DEPRECATED_QUANTIZATION_METHODS" and isinstance(value, ast.List):
            return [item.value for item in value.elts if isinstance(item, ast.Constant)]
    raise LookupError("DEPRECATED_QUANTIZATION_METHODS not found")


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
    arguments = {**engine, **frontend}
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
        "values": value_rules(source, arguments, arg_utils, aliases, enums),
        "exclusive": exclusive_options(
            arg_utils, engine, config_fields(source), enums_by_name(source, enums)
        ),
        "deprecated_quantization": deprecated_quantization(source),
        "quantization": quantization_methods(source),
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
