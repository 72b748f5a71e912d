"""A scanner runs again unless a clean run read exactly the same (tests/scan_cache.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scan_cache import scan_each, scan_once


class Scanner:
    """Counts its runs; finds what it is told to."""

    def __init__(self, findings: list[str]) -> None:
        self.findings, self.runs = findings, 0

    def __call__(self) -> dict[str, list[str]]:
        self.runs += 1
        return {"findings": self.findings}


def _scan(folder: Path, scanner: Scanner, version: str = "1.0") -> dict[str, list[str]]:
    return scan_once(
        "lint",
        version,
        [("a.template.json", folder / "a.template.json")],
        scanner,
        clean=lambda result: result["findings"] == [],
        folder=folder / "kept",
    )


@pytest.mark.parametrize(
    ("findings", "change", "runs"),
    [
        ([], None, 1),  # clean and nothing changed: the kept result
        ([], "template", 2),
        ([], "version", 2),
        (["E3012"], None, 2),  # a finding is never kept: it shows every time
    ],
)
def test_a_scanner_runs_again_unless_a_clean_run_read_the_same(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    findings: list[str],
    change: str | None,
    runs: int,
) -> None:
    monkeypatch.delenv("TEST_SYNTH_CACHE", raising=False)
    (tmp_path / "a.template.json").write_text("{}")
    scanner = Scanner(findings)
    assert _scan(tmp_path, scanner) == {"findings": findings}
    if change == "template":
        (tmp_path / "a.template.json").write_text('{"Resources": {}}')
    assert _scan(tmp_path, scanner, "2.0" if change == "version" else "1.0") == {
        "findings": findings
    }
    assert scanner.runs == runs


def test_a_run_that_trusts_nothing_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SYNTH_CACHE", "run")
    (tmp_path / "a.template.json").write_text("{}")
    scanner = Scanner([])
    _scan(tmp_path, scanner)
    _scan(tmp_path, scanner)
    assert scanner.runs == 2
    assert not (tmp_path / "kept").exists()


def test_after_a_change_only_the_changed_and_the_unclean_files_are_scanned_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_SYNTH_CACHE", raising=False)
    for name in ("network", "cluster", "serving"):
        (tmp_path / f"{name}.json").write_text(name)
    files = [(p.name, p) for p in sorted(tmp_path.glob("*.json"))]
    scanned: list[list[str]] = []

    def run(todo: list[tuple[str, Path]]) -> dict[str, list[str]]:
        scanned.append([name for name, _ in todo])
        return {name: ["W1"] if name == "serving.json" else [] for name, _ in todo}

    def scan() -> dict[str, list[str]]:
        return scan_each("lint", "1.0", files, run, lambda found: found == [], tmp_path / "kept")

    first = scan()
    (tmp_path / "cluster.json").write_text("cluster, changed")
    assert scan() == first == {"cluster.json": [], "network.json": [], "serving.json": ["W1"]}
    assert scanned == [
        ["cluster.json", "network.json", "serving.json"],
        ["cluster.json", "serving.json"],  # the changed one and the one with a finding
    ]
