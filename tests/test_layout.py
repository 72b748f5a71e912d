"""Our `constructs/` folder extends the `constructs` library's namespace instead of shadowing it."""

from __future__ import annotations

import importlib

import constructs
from tests.configurations import PROJECT_ROOT


def test_constructs_library_is_the_real_one() -> None:
    assert hasattr(constructs, "Construct")
    assert "site-packages" in constructs.__file__


def test_project_constructs_import_through_the_library_namespace() -> None:
    module = importlib.import_module("constructs.gpu_vpc")
    assert module.__file__.startswith(str(PROJECT_ROOT / "constructs"))
    assert str(PROJECT_ROOT / "constructs") in list(constructs.__path__)


def test_constructs_folder_has_no_init_file() -> None:
    """An __init__.py would make the folder a regular package that shadows the library."""
    assert not (PROJECT_ROOT / "constructs" / "__init__.py").exists()
