"""The synth cache of tests/conftest.py is reused only while every input of a synth is the same:
a change to the app's code or data names a new folder; a change to what no synth reads does
not (or every edit of a test would synthesize everything again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.configurations import PROJECT_ROOT
from tests.conftest import synth_cache_folder, synth_inputs_digest

CHECKOUT = {
    "app.py": "app",
    "cdk.json": "{}",
    "constructs/serving/ray_service.py": "construct",
    "catalog/instances.py": "facts",
    "examples/quickstart.yaml": "serving: {}",
    "functions/amp_data_source/index.py": "handler",
    "tests/configurations.py": "CONFIGURATIONS = {}",
    "tests/conftest.py": "fixtures",
    "tests/stacks/test_something.py": "a test",
    "docs/operating.md": "prose",
    "pdctl/cli.py": "the CLI",
    "tools/bench.py": "a tool",
    ".venv/lib/site.py": "installed",
    "build/test-synth/x/template.json": "a cached synth",
}


@pytest.mark.parametrize(
    ("path", "changes_the_digest"),
    [
        ("app.py", True),
        ("cdk.json", True),
        ("constructs/serving/ray_service.py", True),
        ("catalog/instances.py", True),
        ("examples/quickstart.yaml", True),
        ("functions/amp_data_source/index.py", True),
        ("tests/configurations.py", True),
        ("tests/conftest.py", True),
        ("stacks/new_stack.py", True),  # a new file, too
        ("tests/stacks/test_something.py", False),
        ("docs/operating.md", False),
        ("pdctl/cli.py", False),
        ("tools/bench.py", False),
        (".venv/lib/site.py", False),
        ("build/test-synth/x/template.json", False),
    ],
)
def test_only_what_a_synth_reads_names_a_new_cache_folder(
    tmp_path: Path, path: str, changes_the_digest: bool
) -> None:
    for name, text in CHECKOUT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    before = synth_inputs_digest(tmp_path)
    assert synth_inputs_digest(tmp_path) == before
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text("changed")
    assert (synth_inputs_digest(tmp_path) != before) is changes_the_digest


def test_the_cdk_environment_names_a_new_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader falls back to CDK_DEFAULT_ACCOUNT; the CLI passes context in CDK_ variables."""
    (tmp_path / "app.py").write_text("app")
    monkeypatch.delenv("CDK_DEFAULT_ACCOUNT", raising=False)
    before = synth_inputs_digest(tmp_path)
    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "111122223333")
    assert synth_inputs_digest(tmp_path) != before


def test_a_run_that_trusts_nothing_synthesizes_into_its_own_folder(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SYNTH_CACHE", "run")
    folder = synth_cache_folder(tmp_path_factory)
    assert PROJECT_ROOT / "build" not in folder.parents
    assert tmp_path_factory.getbasetemp().parent in [folder.parent, folder.parent.parent]
    monkeypatch.delenv("TEST_SYNTH_CACHE")
    kept = synth_cache_folder(tmp_path_factory)
    assert kept == PROJECT_ROOT / "build" / "test-synth" / synth_inputs_digest()
