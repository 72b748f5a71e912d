"""Our `constructs/` folder extends the `constructs` library's namespace instead of shadowing it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import constructs
from tests.configurations import PROJECT_ROOT


def test_constructs_library_is_the_real_one() -> None:
    assert hasattr(constructs, "Construct")
    assert "site-packages" in constructs.__file__


def test_project_constructs_import_through_the_library_namespace() -> None:
    module = importlib.import_module("constructs.network.gpu_vpc")
    assert module.__file__.startswith(str(PROJECT_ROOT / "constructs"))
    assert str(PROJECT_ROOT / "constructs") in list(constructs.__path__)


def test_constructs_folder_has_no_init_file() -> None:
    """An __init__.py would make the folder a regular package that shadows the library."""
    assert not (PROJECT_ROOT / "constructs" / "__init__.py").exists()


def test_constructs_are_grouped_by_stack_and_no_folder_grows_past_thirty_modules() -> None:
    """Each stack's constructs in a folder of its own (common/ for what several share); the
    folders are namespace portions too, so none has an __init__.py either."""
    root = PROJECT_ROOT / "constructs"
    assert not list(root.glob("*.py")), "a construct module belongs in a stack's folder"
    folders = [p for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert {f.name for f in folders} >= {"network", "cluster", "gpu_nodes", "serving"}
    for folder in folders:
        assert not (folder / "__init__.py").exists(), folder
        assert len(list(folder.glob("*.py"))) <= 30, folder


APP_SIDE = ("app.py", "settings_prefetch.py", "app_config", "catalog", "constructs", "stacks",
            "nag", "serving_manifests", "serve_extensions", "functions", "monitoring",
            "manifests")  # fmt: skip


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and getattr(node, "level", 0) == 0
        for alias in node.names
        if isinstance(node, ast.Import) or node.module
    }


def test_no_app_side_module_imports_pdctl_or_tools() -> None:
    """The app is built from the configuration alone: pdctl is a client of the deployment, tools
    are developer commands (and the suite's synth cache, tests/conftest.py, leaves both out of
    what a synth reads)."""
    modules = [
        path
        for each in APP_SIDE
        for path in (
            [PROJECT_ROOT / each] if each.endswith(".py") else (PROJECT_ROOT / each).rglob("*.py")
        )
    ]
    assert len(modules) > 50
    offending = {
        str(path.relative_to(PROJECT_ROOT)): found
        for path in modules
        if (found := _imported(path) & {"pdctl", "tools", "tests"})
    }
    assert offending == {}
