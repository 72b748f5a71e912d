"""What `make` runs, read from its dry run (`make -n`: the commands, none executed): deploy runs
`pdctl preflight` on the same configuration before the CDK CLI starts, unless told not to; and
a system package is never installed without a line saying so first."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.configurations import PROJECT_ROOT

EXAMPLE = "examples/quickstart.yaml"


def _dry_run(*arguments: str) -> list[str]:
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", *arguments],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.splitlines()


def _index(lines: list[str], fragment: str) -> int:
    return next(index for index, line in enumerate(lines) if fragment in line)


@pytest.mark.parametrize(
    ("arguments", "preflight"),
    [
        ((), ".venv/bin/pdctl preflight"),
        ((f"CONFIG={EXAMPLE}",), f".venv/bin/pdctl preflight --config {EXAMPLE}"),
    ],
    ids=["defaults", "config-file"],
)
def test_deploy_runs_preflight_on_the_same_configuration_first(arguments, preflight) -> None:
    lines = _dry_run("deploy", *arguments)
    deploy = _index(lines, "cdk deploy")
    assert preflight in [line.strip() for line in lines[:deploy]]
    if arguments:
        assert f"-c config={EXAMPLE}" in lines[deploy]


def test_skip_preflight_deploys_without_it_and_says_so() -> None:
    lines = _dry_run("deploy", "SKIP_PREFLIGHT=1")
    assert not any("pdctl preflight" in line and "echo" not in line for line in lines)
    said = _index(lines, "SKIP_PREFLIGHT is set")
    assert said < _index(lines, "cdk deploy")


def test_promtool_is_announced_before_apt_get_installs_it() -> None:
    """The recipe is one shell command; in it the announcement comes before apt-get."""
    recipe = "\n".join(_dry_run("-B", ".venv/.promtool"))
    assert "apt-get update" in recipe
    assert recipe.index("make: installing Debian's prometheus package") < recipe.index(
        "apt-get update"
    )


@pytest.mark.parametrize(("arguments", "strict"), [((), False), (("STRICT=1",), True)])
def test_synth_is_strict_only_when_asked(arguments: tuple[str, ...], strict: bool) -> None:
    """STRICT=1 makes `cdk synth` fail on a warning the configuration has not acknowledged."""
    (synth,) = [line for line in _dry_run("synth", *arguments) if "cdk synth" in line]
    assert ("--strict" in synth.split()) == strict


def _phony_targets() -> list[str]:
    text = (PROJECT_ROOT / "Makefile").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith(".PHONY:")]
    return [target for target in line.split(":", 1)[1].split() if target != "clean"]


def test_no_recipe_runs_a_path_of_the_checkout_after_changing_directory() -> None:
    """A recipe that `cd`s elsewhere and then names `.venv/...` or `node_modules/...` runs a
    path that is not there: `make latency-replay` did (`cd tests/e2e && "$(.venv/bin/python
    ...)"`) and failed at once with 'No such file or directory'."""
    wrong = []
    for target in _phony_targets():
        commands = "\n".join(_dry_run(target)).replace("\\\n", " ")
        for command in commands.splitlines():
            for after_cd in command.split("cd ")[1:]:
                if re.search(r"(?<![\w/.$])(\.venv|\.venv-checkov|node_modules)/", after_cd):
                    wrong.append(f"{target}: {command.strip()}")
    assert not wrong, wrong
