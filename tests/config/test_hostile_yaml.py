"""Hostile and broken YAML, in a configuration file and in a `-c` value: each is refused with one
problem naming where it came from, in bounded time and memory, and nothing is synthesized."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from app_config import ConfigError, load_settings
from app_config.yaml_source import MAX_BYTES, MAX_DEPTH, MAX_VALUES
from tests.configurations import cdk_json_context

# Each level doubles the previous one: 30 levels name 2**30 values in a few hundred bytes.
ALIAS_BOMB = "a0: &a0 [x, x]\n" + "".join(
    f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 30)
)
# Each row: the file's bytes, a fragment of the message.
FILES = [
    (ALIAS_BOMB.encode(), f"expands to more than {MAX_VALUES:,} values"),
    (b"tags: &t [*t]\n", "refers to itself"),
    (b"x: " + b"[" * 100_000 + b"]" * 100_000, f"nested more than {MAX_DEPTH} levels"),
    (b"x: " + b"{a: " * 5_000 + b"1" + b"}" * 5_000, f"nested more than {MAX_DEPTH} levels"),
    (b"x: it's # a'\ny: " + b"[" * 100_000, f"nested more than {MAX_DEPTH} levels"),
    (b"region: us-west-2\nregion: eu-west-1\n", "key 'region' appears twice"),
    (b"network:\n  nat_gateways: 1\n  nat_gateways: 2\n", "(line 2 and line 3)"),
    (b"region: eu-west-1\n".decode().encode("utf-16"), "is not UTF-8"),
    (b"region: \xe9u-west-1\n", "byte 0xe9 at offset 8 is not UTF-8"),
    (b"region: us-west-2\x00\n", "not valid YAML"),
    (b"region: [us-west-2\n", "not valid YAML at line 2"),
    (b"region: !!python/object:os.system [ls]\n", "not valid YAML"),
    (b"region: us-west-2\n---\nregion: eu-west-1\n", "expected a single document"),
    (b"- region\n", "must hold a mapping of settings"),
    (b"tags: {a: 1}\n" + b"#" * MAX_BYTES, f"larger than {MAX_BYTES // 1024} KiB"),
]
# `-c` values that start with [ or { are read as YAML by the same loader.
OVERRIDES = [
    ('{"team": "a", "team": "b"}', "key 'team' appears twice"),
    ("[usw2-az1, usw2-az2", "not valid YAML"),
    ("[" * 50_000 + "]" * 50_000, f"nested more than {MAX_DEPTH} levels"),
]


def _refused(context: dict[str, object]) -> tuple[ConfigError, float, int]:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ConfigError) as raised:
            load_settings({**cdk_json_context(), **context}, {})
    finally:
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return raised.value, elapsed, peak


@pytest.mark.parametrize(("content", "fragment"), FILES, ids=[f[1] for f in FILES])
def test_a_hostile_file_is_refused_in_bounded_time_and_memory(
    content: bytes, fragment: str, tmp_path: Path
) -> None:
    config = tmp_path / "hostile.yaml"
    config.write_bytes(content)
    error, elapsed, peak = _refused({"config": str(config)})
    assert [problem.path for problem in error.problems] == ["config"], str(error)
    assert fragment in str(error)
    assert "\n" not in str(error)  # one line
    assert elapsed < 5, f"{elapsed:.1f} s"
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"


@pytest.mark.parametrize(("value", "fragment"), OVERRIDES)
def test_a_hostile_override_is_refused_naming_its_setting(value: str, fragment: str) -> None:
    error, elapsed, _ = _refused({"tags": value})
    assert [problem.path for problem in error.problems] == ["tags"], str(error)
    assert fragment in str(error)
    assert elapsed < 5


def test_aliases_within_the_bound_are_allowed_and_expand() -> None:
    """Anchors are legitimate YAML (one scaling for both groups); only their expansion is
    bounded."""
    settings = load_settings(
        {
            **cdk_json_context(),
            "gpu_nodes": "{prefill: {scaling: &s {min_size: 1, desired_size: 1, max_size: 3}}, "
            "decode: {scaling: *s}}",
        },
        {},
    )
    assert settings.gpu_nodes.prefill.scaling == settings.gpu_nodes.decode.scaling


def test_a_utf8_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    config = tmp_path / "bom.yaml"
    config.write_bytes(b"\xef\xbb\xbfnetwork:\n  nat_gateways: 2\n")
    assert (
        load_settings({**cdk_json_context(), "config": str(config)}, {}).network.nat_gateways == 2
    )


@pytest.mark.parametrize("path", ["missing.yaml", "a\x00b.yaml", "."])
def test_an_unreadable_config_path_is_one_problem(path: str) -> None:
    error, _, _ = _refused({"config": path})
    assert [problem.path for problem in error.problems] == ["config"]


def test_brackets_inside_quotes_are_not_nesting(tmp_path: Path) -> None:
    """The depth pre-check skips quoted scalars as YAML does: the file parses, and the value
    meets the tag rules."""
    config = tmp_path / "quoted.yaml"
    config.write_text("tags:\n  team: '" + "[" * 100 + '\'\n  owner: "a\\" {"\n')
    error, _, _ = _refused({"config": str(config)})
    assert [problem.path for problem in error.problems] == ["tags"]
    assert "characters AWS tags do not allow" in str(error)
