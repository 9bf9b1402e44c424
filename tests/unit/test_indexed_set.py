"""Behaviour of IndexedSet (the Uniform selector), over both twins."""

from __future__ import annotations

import math
import pickle
import random
import types
from typing import Any

import pytest

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

KEY_MAX = 2**64 - 1
BELOW_ONE = math.nextafter(1.0, 0.0)


def snapshot(keys_set: Any) -> tuple[Any, ...]:
    return (len(keys_set), keys_set.keys(), repr(keys_set))


def filled(impl: types.SimpleNamespace, keys: list[int]) -> Any:
    result = impl.IndexedSet()
    for key in keys:
        result.insert(key, 1.0)
    return result


def test_empty(impl: types.SimpleNamespace) -> None:
    empty = impl.IndexedSet()
    assert len(empty) == 0
    assert empty.keys() == []
    assert 0 not in empty
    assert repr(empty) == "IndexedSet(size=0)"
    with pytest.raises(UsageError) as info:
        empty.sample(0.5)
    assert str(info.value) == "Cannot sample from an empty selector."


def test_insert_appends(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [4, 2, 9])
    assert keys_set.keys() == [4, 2, 9]
    assert len(keys_set) == 3
    assert 2 in keys_set and 3 not in keys_set
    assert repr(keys_set) == "IndexedSet(size=3)"


def test_priorities_are_ignored(impl: types.SimpleNamespace) -> None:
    keys_set = impl.IndexedSet()
    keys_set.insert(1, float("nan"))
    keys_set.insert(2, -5.0)
    keys_set.insert(3, float("inf"))
    keys_set.insert(4, 7)
    keys_set.update(1, -1.0)
    keys_set.update_many([1, 2], [float("nan"), 3])
    assert keys_set.keys() == [1, 2, 3, 4]
    assert keys_set.probability(3) == 0.25


def test_delete_moves_last_into_hole(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [10, 20, 30, 40])
    keys_set.delete(20)
    assert keys_set.keys() == [10, 40, 30]
    keys_set.delete(30)  # the last one: nothing moves
    assert keys_set.keys() == [10, 40]
    keys_set.delete(10)
    assert keys_set.keys() == [40]
    keys_set.delete(40)
    assert keys_set.keys() == []
    assert 40 not in keys_set
    keys_set.insert(40, 0.0)
    assert keys_set.keys() == [40]


def test_sample_index_formula(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [10, 20, 30, 40, 50])
    for u, index in [(0.0, 0), (0.19, 0), (0.2, 1), (0.59, 2), (0.6, 3), (0.99, 4)]:
        assert keys_set.sample(u) == ([10, 20, 30, 40, 50][index], 0.2)
    assert keys_set.sample(BELOW_ONE) == (50, 0.2)
    rng = random.Random(2)
    for _ in range(500):
        u = rng.random()
        assert keys_set.sample(u) == (keys_set.keys()[min(int(u * 5), 4)], 1.0 / 5)


def test_sample_is_uniform(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, list(range(10)))
    rng = random.Random(4)
    counts = [0] * 10
    for _ in range(20000):
        key, probability = keys_set.sample(rng.random())
        counts[key] += 1
        assert probability == 0.1
    assert all(abs(count / 20000 - 0.1) < 0.015 for count in counts)


def test_probability(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [1, 2, 3])
    assert keys_set.probability(2) == 1.0 / 3
    keys_set.delete(1)
    assert keys_set.probability(2) == 0.5


def test_growth_and_large_keys(impl: types.SimpleNamespace) -> None:
    keys = [KEY_MAX - i for i in range(3000)]
    keys_set = filled(impl, keys)
    assert keys_set.keys() == keys
    assert all(type(k) is int for k in keys_set.keys())
    for key in keys[::2]:
        keys_set.delete(key)
    assert sorted(keys_set.keys()) == sorted(keys[1::2])
    assert all(key in keys_set for key in keys[1::2])
    assert not any(key in keys_set for key in keys[::2])
    key, probability = keys_set.sample(0.0)
    assert type(key) is int
    assert probability == 1.0 / 1500


def test_clear(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [1, 2, 3])
    keys_set.clear()
    assert len(keys_set) == 0
    assert keys_set.keys() == []
    assert 1 not in keys_set
    keys_set.insert(1, 1.0)
    assert keys_set.keys() == [1]


class LyingInt(int):
    """An int subclass whose __int__, __index__ and __repr__ lie."""

    def __int__(self) -> int:
        return 7

    def __index__(self) -> int:
        return 7

    def __repr__(self) -> str:
        return "LyingInt"


def test_int_subclass_keys_use_the_int_value(impl: types.SimpleNamespace) -> None:
    keys_set = impl.IndexedSet()
    keys_set.insert(LyingInt(3), 1.0)
    assert keys_set.keys() == [3]
    assert type(keys_set.keys()[0]) is int
    assert LyingInt(3) in keys_set
    assert 7 not in keys_set
    with pytest.raises(InvalidArgumentError) as info:
        keys_set.delete(LyingInt(-1))
    assert str(info.value) == "Key must be an integer in [0, 2**64), got -1."
    keys_set.delete(LyingInt(3))
    assert keys_set.keys() == []


def test_contains_non_keys(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [1])
    assert True in keys_set
    assert 1.0 not in keys_set
    assert "1" not in keys_set
    assert -1 not in keys_set
    assert 2**64 + 1 not in keys_set


@pytest.mark.parametrize("key", [-1, 2**64, 2**100])
def test_key_out_of_range(impl: types.SimpleNamespace, key: int) -> None:
    keys_set = filled(impl, [1])
    before = snapshot(keys_set)
    message = f"Key must be an integer in [0, 2**64), got {key!r}."
    for call in (
        lambda: keys_set.insert(key, 1.0),
        lambda: keys_set.update(key, 1.0),
        lambda: keys_set.update_many([1, key], [1.0, 1.0]),
        lambda: keys_set.delete(key),
        lambda: keys_set.probability(key),
    ):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert str(info.value) == message
    assert snapshot(keys_set) == before


@pytest.mark.parametrize("key", [1.5, "1", None])
def test_key_not_an_integer(impl: types.SimpleNamespace, key: object) -> None:
    keys_set = filled(impl, [1])
    before = snapshot(keys_set)
    for call in (
        lambda: keys_set.insert(key, 1.0),
        lambda: keys_set.update(key, 1.0),
        lambda: keys_set.update_many([key], [1.0]),
        lambda: keys_set.delete(key),
        lambda: keys_set.probability(key),
    ):
        with pytest.raises(TypeError):
            call()
    assert snapshot(keys_set) == before


@pytest.mark.parametrize("priority", ["1", None, b"x", [1.0]])
def test_priority_not_a_number(impl: types.SimpleNamespace, priority: object) -> None:
    keys_set = filled(impl, [1])
    before = snapshot(keys_set)
    with pytest.raises(TypeError):
        keys_set.insert(2, priority)
    with pytest.raises(TypeError):
        keys_set.update(1, priority)
    with pytest.raises(TypeError):
        keys_set.update_many([1], [priority])
    assert snapshot(keys_set) == before


def test_duplicate_and_missing(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [1, 2])
    before = snapshot(keys_set)
    with pytest.raises(InvalidArgumentError) as info:
        keys_set.insert(1, 1.0)
    assert str(info.value) == "Key 1 already exists."
    for call in (
        lambda: keys_set.update(3, 1.0),
        lambda: keys_set.update_many([1, 3], [1.0, 1.0]),
        lambda: keys_set.delete(3),
        lambda: keys_set.probability(3),
    ):
        with pytest.raises(NotFoundError) as not_found:
            call()
        assert str(not_found.value) == "Key 3 not found."
    with pytest.raises(InvalidArgumentError) as info:
        keys_set.update_many([1, 2], [1.0])
    assert str(info.value) == "keys and priorities must have the same length, got 2 and 1."
    assert snapshot(keys_set) == before


@pytest.mark.parametrize("u", [1.0, -0.5, 2.0, float("nan"), float("-inf")])
def test_sample_u_out_of_range(impl: types.SimpleNamespace, u: float) -> None:
    keys_set = filled(impl, [1])
    with pytest.raises(InvalidArgumentError) as info:
        keys_set.sample(u)
    assert str(info.value) == f"u must be in [0, 1), got {u!r}."
    with pytest.raises(TypeError):
        keys_set.sample("0.5")


def test_pickle_round_trip(impl: types.SimpleNamespace) -> None:
    keys_set = filled(impl, [5, KEY_MAX, 0, 7])
    keys_set.delete(5)
    copy = pickle.loads(pickle.dumps(keys_set))
    assert type(copy) is type(keys_set)
    assert snapshot(copy) == snapshot(keys_set)
    assert copy.sample(0.3) == keys_set.sample(0.3)
    copy.delete(0)
    assert 0 in keys_set
