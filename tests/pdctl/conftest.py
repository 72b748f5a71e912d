"""Every pdctl test prints to consoles as wide as its longest line: rich reads the terminal's
width once, when a console is made, so a width one test sets (or a worker's own terminal) would
otherwise wrap another test's table and hide the words it looks for. And the EFA-check scripts'
runs, which wait out real time, start as soon as their tests are collected."""

from __future__ import annotations

import sys

import pytest

from pdctl import output

_EFA_SCRIPTS = "tests.pdctl.test_pdctl_efa_check"


def _runs_efa_scripts(session: pytest.Session) -> bool:
    return any(
        "script_runs" in getattr(item, "fixturenames", ())
        and getattr(item, "module", None) is not None
        and item.module.__name__ == _EFA_SCRIPTS
        for item in session.items
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """The EFA-check scripts wait out real time bounds (the late-partner runs about 15 s): they
    start as soon as a run has collected their tests, not when a worker reaches the first of
    them, so the waiting overlaps the other tests instead of holding a worker idle."""
    if _runs_efa_scripts(session):
        module = sys.modules[_EFA_SCRIPTS]
        # pytest's own TempPathFactory of this session (what tmp_path_factory returns)
        module.start_script_runs(session.config._tmp_path_factory)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _EFA_SCRIPTS in sys.modules:
        sys.modules[_EFA_SCRIPTS].wait_for_started_runs()


@pytest.fixture(autouse=True)
def _wide_consoles(monkeypatch: pytest.MonkeyPatch) -> None:
    for console in (output.stdout, output.stderr):
        # _width, not width: undoing `width` would pin every later test to the width read here
        monkeypatch.setattr(console, "_width", 400)
