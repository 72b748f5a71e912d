"""What each of vLLM's quantization methods needs from the checkpoint, read from its source.

vLLM 0.26 builds a method's config at weight load (vllm/model_executor/model_loader/
weight_utils.py ``get_quant_config``), in this order: the checkpoint's config.json
``quantization_config`` (or ``compression_config``); then, for the online shorthands
(vllm/config/quantization.py ``_ONLINE_SHORTHANDS``, resolved by ``EngineArgs`` into
``quantization_config``; ``"online"`` only with a ``quantization_config`` option), an online
config; bitsandbytes in flight; a method
whose ``get_config_filenames()`` is empty is built with no argument (``quant_cls()``); any other
reads the one file of those names beside config.json, or fails with "Cannot find the config file
for <method>". So on a checkpoint whose config.json has no quantization config:

- ``builds_without_checkpoint``: vLLM builds the method's config all the same (it reads no
  file and builds with no argument, or is an online shorthand, or is bitsandbytes);
- else, with ``files``: it needs one of these files beside config.json;
- else it cannot start (``quant_cls()`` misses its arguments: compressed-tensors, quark, and
  ``"online"`` without ``quantization_config``).

app_config/rules/model_fit.py judges ``serving.*.engine_options.quantization`` by it.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.vllm_engine_args import Source

QUANTIZATION_PACKAGE = "vllm.model_executor.layers.quantization"
ONLINE_CONFIG = "vllm/config/quantization.py"
IN_FLIGHT = ("bitsandbytes",)  # get_quant_config: "Inflight BNB quantization"
ABSTRACT_BASE = "QuantizationConfig"


def quantization_methods(source: Source) -> dict[str, dict[str, Any]]:
    """Each name ``get_quantization_config`` maps, with the config class it builds, the files
    that class reads (``get_config_filenames``) and whether it builds with no argument."""
    package = source.tree(_file(source, QUANTIZATION_PACKAGE))
    function = _function(package, "get_quantization_config")
    imported = _imports(function, QUANTIZATION_PACKAGE)
    shorthands = _online_shorthands(source)
    methods = {}
    for method, class_name in _method_to_config(function).items():
        module = imported[class_name]
        files = _class_method_value(source, module, class_name, "get_config_filenames")
        methods[method] = {
            "config_class": class_name,
            "files": files,
            "builds_without_checkpoint": method in shorthands
            or method in IN_FLIGHT
            or (files == [] and _builds_without_arguments(source, module, class_name)),
        }
    for method in shorthands:
        methods.setdefault(method, {"config_class": "OnlineQuantizationConfig", "files": []})
        methods[method]["builds_without_checkpoint"] = True
    return dict(sorted(methods.items()))


def _file(source: Source, module: str) -> str:
    path = module.replace(".", "/")
    for name in (f"{path}.py", f"{path}/__init__.py"):
        if name in source.names:
            return name
    raise LookupError(f"{module}: not in the vLLM source")


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise LookupError(f"{name} not found")


def _imports(node: ast.AST, package: str) -> dict[str, str]:
    """Imported name -> the module it comes from, relative imports resolved against
    ``package`` (the importing file's package)."""
    found = {}
    for child in ast.walk(node):
        if isinstance(child, ast.ImportFrom):
            base = package.rsplit(".", child.level - 1)[0] if child.level else ""
            module = ".".join(p for p in (base, child.module or "") if p)
            for alias in child.names:
                found[alias.asname or alias.name] = module
    return found


def _assigned_dict(nodes: list[ast.AST], name: str) -> ast.Dict:
    """The dict literal assigned to ``name`` (annotated or not) among ``nodes``."""
    for node in nodes:
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node.value
    raise LookupError(f"{name} = {{...}} not found")


def _method_to_config(function: ast.FunctionDef) -> dict[str, str]:
    value = _assigned_dict(list(ast.walk(function)), "method_to_config")
    return {
        key.value: item.id
        for key, item in zip(value.keys, value.values, strict=True)
        if isinstance(key, ast.Constant) and isinstance(item, ast.Name)
    }


def _online_shorthands(source: Source) -> set[str]:
    value = _assigned_dict(source.tree(ONLINE_CONFIG).body, "_ONLINE_SHORTHANDS")
    return {key.value for key in value.keys if isinstance(key, ast.Constant)}


def _class(source: Source, module: str, name: str) -> tuple[ast.ClassDef, str]:
    """The class definition and the module that defines it, through re-exports."""
    path = _file(source, module)
    tree = source.tree(path)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, module
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    imported = _imports(tree, package)
    if name in imported:
        return _class(source, imported[name], name)
    raise LookupError(f"class {name} not found in {module}")


def _lineage(source: Source, module: str, name: str) -> list[ast.ClassDef]:
    """The class and its bases, first base first, up to (not including) QuantizationConfig."""
    node, defined_in = _class(source, module, name)
    chain = [node]
    path = _file(source, defined_in)
    package = defined_in if path.endswith("__init__.py") else defined_in.rsplit(".", 1)[0]
    imported = _imports(source.tree(path), package)
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id != ABSTRACT_BASE:
            chain += _lineage(source, imported.get(base.id, defined_in), base.id)
    return chain


def _class_method_value(source: Source, module: str, name: str, method: str) -> list[str]:
    """The list of strings the class's (or its nearest base's) ``method`` returns."""
    for node in _lineage(source, module, name):
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == method:
                returned = [n.value for n in ast.walk(item) if isinstance(n, ast.Return)]
                if len(returned) == 1 and isinstance(returned[0], ast.List):
                    return [e.value for e in returned[0].elts if isinstance(e, ast.Constant)]
                raise LookupError(f"{name}.{method} does not return one list literal")
    raise LookupError(f"{name}.{method} not found")


def _builds_without_arguments(source: Source, module: str, name: str) -> bool:
    """Whether ``name()`` binds: its nearest ``__init__`` has a default for every parameter."""
    for node in _lineage(source, module, name):
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                arguments = item.args
                positional = [*arguments.posonlyargs, *arguments.args][1:]  # self
                required = len(positional) - len(arguments.defaults)
                keyword_only = [d for d in arguments.kw_defaults if d is None]
                return required <= 0 and not keyword_only
    return True  # QuantizationConfig.__init__(self)
