"""The files an adopter looks for before anything else: a licence the package declares, and a
changelog whose newest release is the package's version."""

from __future__ import annotations

import re
import tomllib

from tests.configurations import PROJECT_ROOT

PYPROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]


def test_the_declared_licence_is_the_licence_file() -> None:
    assert PYPROJECT["license"] == "Apache-2.0"
    assert PYPROJECT["license-files"] == ["LICENSE"]
    text = (PROJECT_ROOT / "LICENSE").read_text()
    assert text.split("\n", 3)[1].strip() == "Apache License"
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a notice


def test_the_changelogs_newest_release_is_the_package_version() -> None:
    changelog = (PROJECT_ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\d+\.\d+\.\d+) - (\d{4}-\d{2}-\d{2})$", changelog, re.MULTILINE)
    assert releases, "CHANGELOG.md lists no release as '## X.Y.Z - YYYY-MM-DD'"
    assert releases[0][0] == PYPROJECT["version"]


def test_the_files_people_look_for_are_there() -> None:
    for name in ("LICENSE", "SECURITY.md", "CONTRIBUTING.md", "CHANGELOG.md"):
        assert (PROJECT_ROOT / name).stat().st_size > 0, name
