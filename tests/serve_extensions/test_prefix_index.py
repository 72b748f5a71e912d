"""The prefix index the app's router keeps in its own process: keys, matching, the bound."""

from __future__ import annotations

import pytest

from serve_extensions.prefix_index import PrefixIndex, block_keys, rendezvous_order

BLOCK = 8


def keys(text: str, max_blocks: int = 100) -> list[int]:
    return block_keys(text, BLOCK, max_blocks)


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        ("a" * 8 + "b" * 8 + "c" * 8, "a" * 8 + "b" * 8 + "d" * 8, 2),
        ("a" * 8 + "b" * 8, "x" + "a" * 7 + "b" * 8, 0),  # differs in the first block
        # Same second block after different first blocks: the key covers the whole prefix.
        ("a" * 8 + "b" * 8, "c" * 8 + "b" * 8, 0),
        ("a" * 24, "a" * 24, 3),
    ],
)
def test_two_prompts_share_exactly_the_keys_of_their_common_full_blocks(
    first: str, second: str, shared: int
) -> None:
    a, b = keys(first), keys(second)
    common = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    assert common == shared


@pytest.mark.parametrize(("length", "blocks"), [(7, 0), (8, 1), (15, 1), (16, 2), (1000, 5)])
def test_only_full_blocks_count_up_to_the_limit(length: int, blocks: int) -> None:
    assert len(keys("x" * length, max_blocks=5)) == blocks


def test_keys_are_the_same_in_every_process() -> None:
    """Every decode replica's router must agree (no per-process hash salt): a fixed value."""
    assert keys("a" * 8) == [block_keys("a" * 8, BLOCK, 1)[0]]
    assert rendezvous_order(keys("a" * 8)[0], ["r1", "r2", "r3"]) == rendezvous_order(
        keys("a" * 8)[0], ["r3", "r1", "r2"]
    )


def test_removing_a_replica_moves_only_the_prefixes_it_was_home_for() -> None:
    replicas = [f"replica-{i}" for i in range(4)]
    prefixes = [keys(f"{i:08d}")[0] for i in range(400)]
    before = {key: rendezvous_order(key, replicas)[0] for key in prefixes}
    after = {key: rendezvous_order(key, replicas[:-1])[0] for key in prefixes}
    moved = {key for key in prefixes if before[key] != after[key]}
    assert moved == {key for key in prefixes if before[key] == replicas[-1]}
    # And homes spread: each replica is home to a fair share (400 / 4, loosely).
    assert all(60 < list(before.values()).count(r) < 140 for r in replicas)


def test_match_gives_each_replica_the_depth_of_the_prefix_it_holds() -> None:
    index = PrefixIndex(max_blocks=100)
    prompt = keys("a" * 8 + "b" * 8 + "c" * 8)
    index.insert(prompt[:1], "one")
    index.insert(prompt, "three")
    assert index.match(prompt, ["one", "three", "none"]) == {"one": 1, "three": 3}
    assert index.match(prompt, ["one"]) == {"one": 1}
    assert index.match(keys("z" * 24), ["one", "three"]) == {}


def test_the_index_never_holds_more_than_its_bound_and_forgets_the_least_recently_used() -> None:
    index = PrefixIndex(max_blocks=4)
    used, unused, latest = keys("u" * 16), keys("x" * 8), keys("n" * 16)
    index.insert(used, "r")
    index.insert(unused, "r")
    index.match(used, ["r"])  # a match counts as a use
    index.insert(latest, "r")  # five entries: the least recently used goes
    assert len(index) == 4
    assert index.match(unused, ["r"]) == {}
    assert index.match(used, ["r"]) == {"r": 2}
    assert index.match(latest, ["r"]) == {"r": 2}


def test_a_replica_that_left_is_forgotten() -> None:
    index = PrefixIndex(max_blocks=10)
    prompt = keys("a" * 16)
    index.insert(prompt, "gone")
    index.insert(prompt[:1], "kept")
    index.remove_replica("gone")
    assert index.match(prompt, ["gone", "kept"]) == {"kept": 1}
    index.remove_replica("kept")
    assert len(index) == 0


@pytest.mark.parametrize("bound", [0, -1])
def test_an_index_without_room_is_refused(bound: int) -> None:
    with pytest.raises(ValueError, match="max_blocks"):
        PrefixIndex(bound)
