"""A simulation runs again unless a run read exactly the same inputs (tests/computed_once.py),
and the workers of a run compute it once between them."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tests.computed_once import computed_once


def _compute_and_count(root: Path) -> int:
    """The work: counts its runs in a file (visible across processes), returns the input."""
    runs = root / "runs"
    with runs.open("a") as count:
        count.write("x")
    return int((root / "inputs" / "n.txt").read_text())


def _once(root: Path) -> int:
    return computed_once("sim", lambda: _compute_and_count(root), ("inputs",), root / "kept", root)


@pytest.mark.parametrize(
    ("change", "runs", "second"),
    [(None, 1, 1), ("input", 2, 2), ("new file", 2, 1)],
)
def test_a_result_is_computed_again_only_when_an_input_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str | None, runs: int, second: int
) -> None:
    monkeypatch.delenv("TEST_SYNTH_CACHE", raising=False)
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "n.txt").write_text("1")
    assert _once(tmp_path) == 1
    if change == "input":
        (tmp_path / "inputs" / "n.txt").write_text("2")
    elif change == "new file":
        (tmp_path / "inputs" / "other.py").write_text("")
    assert _once(tmp_path) == second
    assert len((tmp_path / "runs").read_text()) == runs


def test_workers_asking_together_compute_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_SYNTH_CACHE", raising=False)
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "n.txt").write_text("7")
    with multiprocessing.get_context("fork").Pool(3) as pool:
        assert pool.map(_once, [tmp_path] * 6) == [7] * 6
    assert (tmp_path / "runs").read_text() == "x"
