"""Mistaken configuration files, by class: YAML 1.1's implicit types, anchors shared between the
sides, and files that say nothing. Each row: the file -> the setting or line named and what the
message must say."""

from __future__ import annotations

from pathlib import Path

import pytest

from app_config import ConfigError, load_settings
from tests.configurations import cdk_json_context


def _load(tmp_path: Path, text: str, **overrides: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_settings({**cdk_json_context(), "config": str(path), **overrides}, {})


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        _load(tmp_path, text)
    return [str(problem) for problem in raised.value.problems]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tags:\n  team: no\n", "'no' is read by YAML 1.1 as the boolean false"),
        ("tags:\n  on: call\n", "'on' is read by YAML 1.1 as the boolean true"),
        ("retain_data_on_destroy: yes\n", "write true for a switch"),
        ("network:\n  nat_gateways: 010\n", "(octal, 8)"),
        ("network:\n  nat_gateways: 0b1\n", "(binary)"),
        ("observability:\n  log_retention_days: 1_000\n", "with '_' separators"),
        ("observability:\n  log_retention_days: 1:30\n", "sexagesimal"),
        ("tags:\n  since: 2026-12-01\n", "read by YAML 1.1 as a date"),
        ("serving:\n  prefill:\n    gpu_memory_utilization: .nan\n", "not-a-number or infinity"),
        ("serving:\n  prefill:\n    gpu_memory_utilization: .inf\n", "not-a-number or infinity"),
    ],
)
def test_a_value_yaml_1_1_types_otherwise_than_yaml_1_2_is_refused_with_the_fix(
    tmp_path: Path, text: str, fragment: str
) -> None:
    (problem,) = _problems(tmp_path, text)
    assert problem.startswith("config = ")
    assert fragment in problem
    assert "line " in problem


@pytest.mark.parametrize(
    "text",
    [
        "tags:\n  team: 'no'\n  since: \"2026-12-01\"\n",
        "retain_data_on_destroy: false\n",
        "network:\n  nat_gateways: 1\n",
        "network:\n  nat_gateways: 01\n",  # octal and decimal agree
        "serving:\n  prefill:\n    gpu_memory_utilization: 0.5\n",
    ],
)
def test_values_both_versions_read_alike_are_accepted(tmp_path: Path, text: str) -> None:
    _load(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        (
            "cluster:\n  kubernetes_version: 1.35\n",
            "cluster.kubernetes_version",
            "as a number, which",
        ),
        ("tags:\n  version: 1.10\n", "tags.version", "drops trailing zeros (1.10 is 1.1)"),
        ("cluster:\n  name: 12\n", "cluster.name", "read it unquoted as a number: quote"),
    ],
)
def test_a_number_where_a_setting_takes_text_says_to_quote_it(
    tmp_path: Path, text: str, path: str, fragment: str
) -> None:
    """YAML 1.1 and 1.2 agree that an unquoted 1.35 is a number; a version or a name written
    so is refused by the value YAML made of it, which the message says how to keep as text."""
    (problem,) = _problems(tmp_path, text)
    assert problem.startswith(f"{path} = ")
    assert fragment in problem


SHARED_SIDE = """\
gpu_nodes:
  prefill: &side
    instance_type: p5.48xlarge
    scaling: {min_size: 1, desired_size: 1, max_size: 2}
  decode: *side
"""


def test_an_override_of_one_side_never_changes_the_other_through_an_anchor(
    tmp_path: Path,
) -> None:
    settings = _load(tmp_path, SHARED_SIDE, **{"gpu_nodes.prefill.scaling.max_size": "3"})
    assert settings.gpu_nodes.prefill.scaling.max_size == 3
    assert settings.gpu_nodes.decode.scaling.max_size == 2


def test_an_override_of_one_side_never_changes_the_other_through_a_merge_key(
    tmp_path: Path,
) -> None:
    """A merge key copies the anchored mapping's top level only: decode's `scaling` would be
    prefill's very object."""
    text = """\
gpu_nodes:
  prefill: &side
    scaling: {min_size: 1, desired_size: 1, max_size: 2}
  decode:
    <<: *side
    root_volume_gib: 200
"""
    settings = _load(tmp_path, text, **{"gpu_nodes.decode.scaling.max_size": "4"})
    prefill, decode = settings.gpu_nodes.prefill, settings.gpu_nodes.decode
    assert (prefill.scaling.max_size, decode.scaling.max_size) == (2, 4)
    assert decode.root_volume_gib == 200


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "{}\n"])
def test_a_file_with_no_settings_is_an_error_not_the_defaults(tmp_path: Path, text: str) -> None:
    (problem,) = _problems(tmp_path, text)
    assert "holds no settings" in problem


@pytest.mark.parametrize(
    ("text", "path"),
    [("gpu_nodes:\n", "gpu_nodes"), ("serving:\n  prefill:\n", "serving.prefill")],
)
def test_a_section_cut_off_after_its_key_is_an_error_naming_it(
    tmp_path: Path, text: str, path: str
) -> None:
    (problem,) = _problems(tmp_path, text)
    assert problem.startswith(f"{path}: is empty")
