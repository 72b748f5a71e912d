"""Every pdctl test prints to consoles as wide as its longest line: rich reads the terminal's
width once, when a console is made, so a width one test sets (or a worker's own terminal) would
otherwise wrap another test's table and hide the words it looks for."""

from __future__ import annotations

import pytest

from pdctl import output


@pytest.fixture(autouse=True)
def _wide_consoles(monkeypatch: pytest.MonkeyPatch) -> None:
    for console in (output.stdout, output.stderr):
        # _width, not width: undoing `width` would pin every later test to the width read here
        monkeypatch.setattr(console, "_width", 400)
