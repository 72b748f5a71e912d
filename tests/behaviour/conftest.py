"""promtool for the alert rule tests: Debian's `prometheus` package (2.42), which
`make setup-dev` installs. Missing promtool fails those tests: no silent skip."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.fail("promtool not found: `make setup-dev` installs Debian's prometheus package")
    return found
