"""One local Ray cluster per session, running the Serve config synthesized into cdk.out.

Run from the project root with the e2e venv's Python (`make e2e`):
    <e2e venv>/bin/python -m pytest -o addopts= -ra --strict-markers -p no:cacheprovider \
        --confcutdir=tests/e2e tests/e2e
``--confcutdir`` keeps tests/conftest.py (the CDK suite's, which imports aws_cdk) out;
``-o addopts=`` drops the main suite's pytest-xdist options (and its --ignore of this folder).

Environment (defaults in brackets):
  PD_E2E_CDK_OUT         the synthesized templates [<root>/cdk.out]
  PD_E2E_RUN_DIR         records, Ray's logs, figures [<root>/build/e2e]
  PD_E2E_PROJECT_PYTHON  the project venv's Python, which runs pdctl [<root>/.venv/bin/python]
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from harness import PROJECT_PYTHON, PROJECT_ROOT, Background, LocalRay, Synthesized

CDK_OUT = Path(os.environ.get("PD_E2E_CDK_OUT", PROJECT_ROOT / "cdk.out"))
RUN_DIR = Path(os.environ.get("PD_E2E_RUN_DIR", PROJECT_ROOT / "build" / "e2e"))
FIGURES: dict[str, Any] = {}
BACKGROUND_TIMEOUT_S = 900  # each background scenario's bound
_BACKGROUND: list[Background] = []
_NOT_STARTED: list[str] = []  # why the background scenarios were not started


def _runs_in_background(item: pytest.Item) -> bool:
    return hasattr(getattr(item, "module", None), "background_scenarios")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules whose scenarios run in the background go last (in their order), so that
    their scenarios have the whole session to run beside the other modules rather than hold it
    up; the others keep their order (test_under_load.py last of those that use the session's
    cluster)."""
    items.sort(key=_runs_in_background)  # stable


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the scenarios of the collected modules that define ``background_scenarios`` (a
    function of the synthesized app and an output folder, returning {name: harness.Scenario}),
    one after another beside the session's tests (harness.Background says why)."""
    if session.config.option.collectonly:
        return
    modules = dict.fromkeys(getattr(item, "module", None) for item in session.items)
    plans = [m.background_scenarios for m in modules if hasattr(m, "background_scenarios")]
    if not plans:
        return
    background = Background(RUN_DIR / "background", BACKGROUND_TIMEOUT_S)
    try:
        synthesized = Synthesized.read(CDK_OUT)
    except (LookupError, OSError) as unreadable:  # the tests that need it fail with this
        _NOT_STARTED.append(f"cdk.out could not be read: {unreadable}")
        return
    for plan in plans:
        for name, scenario in plan(synthesized, background.log_dir).items():
            background.add(name, scenario)
    background.start()
    _BACKGROUND.append(background)


@pytest.fixture(scope="session")
def background() -> Background:
    """The scenarios started at collection (pytest_collection_finish)."""
    if not _BACKGROUND:
        pytest.fail(" ".join(_NOT_STARTED) or "no background scenarios were started")
    return _BACKGROUND[0]


@pytest.fixture(scope="session")
def synthesized() -> Synthesized:
    return Synthesized.read(CDK_OUT)


@pytest.fixture(scope="session")
def pd(synthesized: Synthesized) -> Iterator[LocalRay]:
    """The deployed application, RUNNING; Ray is shut down after the session whatever happens."""
    cluster = LocalRay(synthesized, RUN_DIR)
    start = time.monotonic()
    try:
        cluster.start()
        cluster.deploy(cluster.config)
        cluster.timings["ready_s"] = time.monotonic() - start
        yield cluster
    finally:
        cluster.stop()
        FIGURES["startup"] = {key: round(value, 1) for key, value in cluster.timings.items()}


@pytest.fixture(scope="session")
def client(pd: LocalRay) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{pd.base_url}/v1", api_key="unused", timeout=60, max_retries=0)


@pytest.fixture(scope="session")
def model(pd: LocalRay) -> str:
    return pd.config["applications"][0]["args"]["decode_config"]["model_loading_config"]["model_id"]


@pytest.fixture(scope="session")
def project_python() -> Path:
    if not PROJECT_PYTHON.exists():
        pytest.fail(f"{PROJECT_PYTHON} is missing: run `make setup` (or set PD_E2E_PROJECT_PYTHON)")
    return PROJECT_PYTHON


@pytest.fixture(scope="session")
def figures() -> dict[str, Any]:
    """Measurements for docs/verification.md; written to <run dir>/figures.json at the end."""
    return FIGURES


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for background in _BACKGROUND:
        background.stop()
    if FIGURES:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        (RUN_DIR / "figures.json").write_text(json.dumps(FIGURES, indent=2) + "\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FIGURES:
        terminalreporter.section("end-to-end figures")
        terminalreporter.write_line(json.dumps(FIGURES, indent=2))
        terminalreporter.write_line(f"(saved to {RUN_DIR / 'figures.json'})")
