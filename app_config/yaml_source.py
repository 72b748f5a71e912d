"""YAML for configuration, bounded: a configuration file (or a `-c` value) is read in time and
memory proportional to its size, whatever it contains.

PyYAML's safe loader already refuses arbitrary objects, but not the rest of what a hostile or
mistaken file can hold: an alias bomb (a few lines whose aliases expand to billions of
values; the loader shares them, then every later walk, validation included, expands them),
nesting deep enough to exhaust the interpreter's stack, a key given twice (YAML says keys are
unique; PyYAML keeps the last silently), bytes that are not UTF-8. Each is refused here with one
line that says what was wrong and where.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from app_config.yaml_typing import implicit_typing_problem

MAX_BYTES = 256 * 1024  # a configuration is a few kilobytes
MAX_VALUES = 20_000  # values after expanding aliases; the full model has a few hundred
MAX_DEPTH = 32  # the model nests five levels


class YamlError(Exception):
    """What is wrong with a YAML text, in words, for a Problem's message."""


def load_yaml(text: str) -> Any:
    """Parse one YAML (or JSON) document within the bounds above."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlError(f"larger than {MAX_BYTES // 1024} KiB; a configuration is a few KiB")
    _check_flow_depth(text)
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as error:  # the reader refuses unprintable characters up front
        raise YamlError(f"not valid YAML: {' '.join(str(error).split())}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node, {}, depth=0)
        return unshared(loader.construct_document(node))
    except yaml.MarkedYAMLError as error:
        raise YamlError(_describe(error)) from None
    except yaml.YAMLError as error:
        raise YamlError(f"not valid YAML: {' '.join(str(error).split())}") from None
    except RecursionError:
        raise YamlError(f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def read_yaml_file(path: str) -> Any:
    """A configuration file: UTF-8 (a byte-order mark is allowed), within MAX_BYTES."""
    file = Path(path)
    try:
        if file.is_dir():
            raise YamlError("is a directory; name the configuration file in it")
        if file.exists() and not file.is_file():
            raise YamlError("is not a regular file (a device or a pipe); name a YAML file")
        if not file.is_file():
            raise YamlError("no such file (paths are relative to the directory cdk runs in)")
        with file.open("rb") as stream:
            data = stream.read(MAX_BYTES + 1)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise YamlError(f"cannot be read: {error}") from None
    if len(data) > MAX_BYTES:
        raise YamlError(f"larger than {MAX_BYTES // 1024} KiB; a configuration is a few KiB")
    try:
        text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
    except UnicodeDecodeError as error:
        raise YamlError(
            f"byte {data[error.start]:#04x} at offset {error.start} is not UTF-8; save the file "
            "as UTF-8"
        ) from None
    return load_yaml(text)


def unshared(value: Any) -> Any:
    """The same values with no mapping or list shared between two places. PyYAML builds an
    alias (`decode: *side`) as the very object its anchor names, and a merge key (`<<: *base`)
    copies only the top level: an override of one side would then change the other through the
    shared object (`-c gpu_nodes.prefill.scaling.max_size=3` moving decode's too)."""
    if isinstance(value, dict):
        return {key: unshared(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unshared(item) for item in value]
    return value


def _check_flow_depth(text: str) -> None:
    """Refuse deeply nested flow collections before parsing: PyYAML's scanner revisits every
    open flow level on each token, so `[[[[...` takes time quadratic in its depth. Quoted
    scalars and comments are skipped where YAML starts them (a quote at the start of a value,
    '#' after a space), so a quote inside a word (it's) hides nothing."""
    depth, quote, comment, previous = 0, "", False, "\n"
    for character in text:
        if comment:
            comment = character != "\n"
        elif quote:
            quote = "" if character == quote else quote
        elif character in "'\"" and previous in "\n:-[{,? ":
            quote = character
        elif character == "#" and previous in "\n ":
            comment = True
        elif character in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlError(f"nested more than {MAX_DEPTH} levels deep")
        elif character in "]}":
            depth = max(depth - 1, 0)
        if character == "\n" or not character.isspace():
            previous = character
        elif previous != "\n":
            previous = " "


def _check(node: Node, sizes: dict[int, int], depth: int) -> int:
    """The number of values the node expands to, counting each alias as often as it is used
    (memoised per node, so the walk is linear in the file); refuses duplicate keys, deep
    nesting and expansions beyond MAX_VALUES."""
    if depth > MAX_DEPTH:
        raise YamlError(f"nested more than {MAX_DEPTH} levels deep (or an alias refers to itself)")
    if id(node) in sizes:
        return sizes[id(node)]
    size = 1
    if isinstance(node, ScalarNode):
        problem = implicit_typing_problem(node)
        if problem:
            raise YamlError(f"line {node.start_mark.line + 1}: {problem}")
    if isinstance(node, SequenceNode):
        size += sum(_check(item, sizes, depth + 1) for item in node.value)
    elif isinstance(node, MappingNode):
        seen: dict[tuple[str, str], Node] = {}
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value != "<<":
                first = seen.setdefault((key.tag, key.value), key)
                if first is not key:
                    raise YamlError(
                        f"key {key.value!r} appears twice in one mapping (line "
                        f"{first.start_mark.line + 1} and line {key.start_mark.line + 1}); YAML "
                        "keys are unique, keep one"
                    )
            size += _check(key, sizes, depth + 1) + _check(value, sizes, depth + 1)
    if size > MAX_VALUES:
        raise YamlError(
            f"expands to more than {MAX_VALUES:,} values (anchors and aliases repeat what they "
            "name); write the values out"
        )
    sizes[id(node)] = size
    return size


def _describe(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = " ".join(part for part in (error.context, error.problem) if part)
    return f"not valid YAML{where}: {' '.join(what.split())}"
