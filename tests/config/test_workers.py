"""`-n auto` starts a worker more than the cores (tests/conftest.py), and an explicit
PYTEST_XDIST_AUTO_NUM_WORKERS still decides as pytest-xdist documents."""

from __future__ import annotations

import os

import pytest

from tests.conftest import EXTRA_WORKERS, pytest_xdist_auto_num_workers


def test_auto_is_one_worker_per_core_and_one_more(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert pytest_xdist_auto_num_workers(pytestconfig) == cores + EXTRA_WORKERS == cores + 1


def test_a_count_in_the_environment_is_left_to_xdist(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "5")
    assert pytest_xdist_auto_num_workers(pytestconfig) is None
