"""The settings loaded on a thread during `import aws_cdk` (settings_prefetch.py): the thread
never reaches jsii, never imports a module at the same time as the main thread, and the app gets
exactly the settings, or the error, that loading them on the main thread gives."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import settings_prefetch
from app_config import ConfigError, Settings, load_settings
from settings_prefetch import CONTEXT_ENV, CONTEXT_OVERFLOW_ENV, SettingsPrefetch
from tests.configurations import PROJECT_ROOT, cdk_json_context

CDK_LIBRARIES = {"aws_cdk", "jsii", "constructs", "cdk_nag"}

# After `start` (the shared modules imported, no thread: no CDK_CONTEXT_JSON), the modules one
# piece of work adds; one line each.
_NEW_MODULES = """
import json, sys
import settings_prefetch
settings_prefetch.start({{}})
before = set(sys.modules)
{work}
print(json.dumps(sorted(set(sys.modules) - before)))
"""

_THREAD_WORK = """
from app_config import ConfigError
context = json.loads(sys.argv[1])
settings_prefetch._load(context, {})
try:
    settings_prefetch._load({**context, "serving.model.id": "Qwen/Qwen3-32B\\n"}, {})
except ConfigError:
    pass
"""


def _modules_added(work: str, *arguments: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", _NEW_MODULES.format(work=work), *arguments],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def thread_modules() -> set[str]:
    """What the thread's work imports: loading valid settings and refusing invalid ones."""
    return _modules_added(_THREAD_WORK, json.dumps(cdk_json_context()))


def test_nothing_the_thread_imports_is_a_cdk_library(thread_modules: set[str]) -> None:
    """jsii's kernel pipe is not thread-safe: the thread must not be able to send a request."""
    assert "app_config.model" in thread_modules  # the work did run
    assert {m for m in thread_modules if m.split(".")[0] in CDK_LIBRARIES} == set()


def test_the_thread_and_the_cdk_imports_share_no_module(thread_modules: set[str]) -> None:
    """Beside the thread, the main thread imports aws_cdk and cdk_nag; a module both need is in
    SHARED_MODULES, imported before the thread starts (add what this test names there)."""
    cdk_modules = _modules_added("import aws_cdk, cdk_nag")
    assert "jsii" in cdk_modules
    assert sorted(thread_modules & cdk_modules) == []


def test_beside_the_thread_app_py_imports_only_the_cdk_libraries() -> None:
    """Between the thread's start and its end, app.py runs nothing but these two imports."""
    statements = ast.parse((PROJECT_ROOT / "app.py").read_text()).body
    sources = [ast.unparse(statement) for statement in statements]
    start = sources.index("PREFETCH = settings_prefetch.start()")
    end = sources.index("PREFETCH.wait()")
    assert sources[start + 1 : end] == ["import aws_cdk as cdk", "import cdk_nag"]


def _context(**overrides: Any) -> dict[str, Any]:
    return {**cdk_json_context(), **overrides}


def _prefetch(context: Mapping[str, Any]) -> SettingsPrefetch:
    return settings_prefetch.start({CONTEXT_ENV: json.dumps(context)})


class _Loads:
    """Stands for `load_settings` on the main thread: records the contexts it is given."""

    def __init__(self) -> None:
        self.contexts: list[Mapping[str, Any]] = []

    def __call__(self, context: Mapping[str, Any]) -> Settings:
        self.contexts.append(context)
        return Settings.model_construct()


def test_the_apps_context_read_ahead_gives_the_threads_settings() -> None:
    context = _context()
    loads = _Loads()
    settings = _prefetch(context).settings(json.loads(json.dumps(context)), loads)
    assert loads.contexts == []
    assert settings == load_settings(context, {})


# (what the CLI passed, what the App holds): any difference, down to a value's JSON type, is
# loaded again on the main thread from the App's context.
DIFFERENT_CONTEXTS = [
    (_context(), _context(**{"gpu_nodes.decode.scaling.max_size": "3"})),
    (_context(**{"x": 1}), _context(**{"x": 1.0})),
    (_context(**{"x": 1}), _context(**{"x": True})),
    (_context(**{"x": "1"}), _context(**{"x": 1})),
    (_context(**{"x": {"a": 1}}), _context()),
]


@pytest.mark.parametrize(("read_ahead", "apps"), DIFFERENT_CONTEXTS)
def test_another_context_in_the_app_is_loaded_on_the_main_thread(
    read_ahead: dict[str, Any], apps: dict[str, Any]
) -> None:
    loads = _Loads()
    _prefetch(read_ahead).settings(apps, loads)
    assert loads.contexts == [apps]


def test_the_threads_error_is_raised_as_it_was() -> None:
    bad = _context(**{"serving.model.id": "Qwen/Qwen3-32B\n"})
    with pytest.raises(ConfigError) as on_main:
        load_settings(bad, {})
    with pytest.raises(ConfigError) as from_thread:
        _prefetch(bad).settings(bad, _Loads())
    assert str(from_thread.value) == str(on_main.value)


UNREAD_ENVIRONMENTS = {
    "not-run-by-the-cli": {},
    "not-json": {CONTEXT_ENV: "{not json"},
    "not-a-mapping": {CONTEXT_ENV: "[1]"},
    "overflow-file-missing": {CONTEXT_ENV: "{}", CONTEXT_OVERFLOW_ENV: "/no/such/file.json"},
}


@pytest.mark.parametrize("environ", UNREAD_ENVIRONMENTS.values(), ids=list(UNREAD_ENVIRONMENTS))
def test_a_context_not_read_here_starts_no_thread(environ: dict[str, str]) -> None:
    """Left to the App, which reads (or refuses) it as it always did."""
    prefetch = settings_prefetch.start(environ)
    loads = _Loads()
    prefetch.settings(_context(), loads)
    assert loads.contexts == [_context()]


def test_the_cli_overflow_file_is_read_as_the_app_reads_it(tmp_path: Path) -> None:
    """aws-cdk-lib's App: the CDK_CONTEXT_JSON object, then the overflow file's keys over it."""
    overflow = tmp_path / "context.json"
    overflow.write_text(json.dumps({"region": "eu-west-1"}))
    environ = {CONTEXT_ENV: json.dumps(_context()), CONTEXT_OVERFLOW_ENV: str(overflow)}
    assert settings_prefetch.context_from_environment(environ) == _context(region="eu-west-1")
