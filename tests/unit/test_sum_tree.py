"""Behaviour of SumTree (the Prioritized selector), over both twins."""

from __future__ import annotations

import math
import pickle
import random
import sys
import types
from typing import Any

import pytest

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

KEY_MAX = 2**64 - 1
BELOW_ONE = math.nextafter(1.0, 0.0)


# ------------------------------------------------------------------------- helpers


def reference_sample(weights: list[float], u: float) -> tuple[int, float]:
    """The documented algorithm over the weights in slot order: (slot, probability)."""
    n = len(weights)
    sums = [0.0] * n
    for i in range(n - 1, -1, -1):
        left, right = 2 * i + 1, 2 * i + 2
        sums[i] = (
            weights[i] + (sums[left] if left < n else 0.0) + (sums[right] if right < n else 0.0)
        )
    total = sums[0]
    if total <= 0.0:
        return min(int(u * n), n - 1), 1.0 / n
    target = u * total
    i = 0
    while True:
        left, right = 2 * i + 1, 2 * i + 2
        ls = sums[left] if left < n else 0.0
        rs = sums[right] if right < n else 0.0
        if target < ls:
            i = left
            continue
        target -= ls
        if target < weights[i]:
            break
        target -= weights[i]
        if rs > 0.0:
            i = right
            continue
        if weights[i] > 0.0:
            break
        i, target = left, 0.0
    return i, weights[i] / total


def reference_total(weights: list[float]) -> float:
    n = len(weights)
    sums = [0.0] * n
    for i in range(n - 1, -1, -1):
        left, right = 2 * i + 1, 2 * i + 2
        sums[i] = (
            weights[i] + (sums[left] if left < n else 0.0) + (sums[right] if right < n else 0.0)
        )
    return sums[0] if n else 0.0


def snapshot(tree: Any) -> tuple[Any, ...]:
    keys = tree.keys()
    return (len(tree), keys, [tree.weight(k) for k in keys], tree.total, repr(tree))


def filled(impl: types.SimpleNamespace, exponent: float, priorities: dict[int, float]) -> Any:
    tree = impl.SumTree(exponent)
    for key, priority in priorities.items():
        tree.insert(key, priority)
    return tree


# ------------------------------------------------------------------- construction


def test_empty_tree(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(1.0)
    assert len(tree) == 0
    assert tree.total == 0.0
    assert tree.keys() == []
    assert tree.priority_exponent == 1.0
    assert 0 not in tree
    assert repr(tree) == "SumTree(priority_exponent=1.0, size=0, total=0.0)"


def test_priority_exponent_is_read_only(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(0.5)
    assert tree.priority_exponent == 0.5
    with pytest.raises(AttributeError):
        tree.priority_exponent = 1.0
    with pytest.raises(AttributeError):
        tree.total = 1.0


def test_exponent_accepts_ints(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(2)
    assert type(tree.priority_exponent) is float
    tree.insert(1, 3)
    assert tree.weight(1) == 9.0


@pytest.mark.parametrize("capacity", [0, -1])
def test_initial_capacity_below_one(impl: types.SimpleNamespace, capacity: int) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        impl.SumTree(1.0, capacity)
    assert str(info.value) == f"initial_capacity must be >= 1, got {capacity}."


def test_bad_constructor_types(impl: types.SimpleNamespace) -> None:
    with pytest.raises(TypeError):
        impl.SumTree("1.0")
    with pytest.raises(TypeError):
        impl.SumTree(1.0, 2.5)


# ---------------------------------------------------------------- insert / weights


def test_insert_keeps_slot_order(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {5: 1.0, 3: 2.0, 9: 3.0})
    assert tree.keys() == [5, 3, 9]
    assert len(tree) == 3
    assert 3 in tree and 4 not in tree
    assert tree.total == 6.0
    assert repr(tree) == "SumTree(priority_exponent=1.0, size=3, total=6.0)"


def test_weights_are_priority_to_the_exponent(impl: types.SimpleNamespace) -> None:
    priorities = {1: 0.5, 2: 2.0, 3: 7.25, 4: 1e-3, 5: 0.0}
    tree = filled(impl, 0.6, priorities)
    for key, priority in priorities.items():
        expected = 0.0 if priority == 0.0 else priority**0.6
        assert tree.weight(key) == expected
    weights = [tree.weight(k) for k in tree.keys()]
    assert tree.total == reference_total(weights)
    total = sum(p**0.6 for p in priorities.values() if p)
    assert math.isclose(tree.total, total, rel_tol=1e-12)
    for key, priority in priorities.items():
        expected = (priority**0.6 if priority else 0.0) / tree.total
        assert tree.probability(key) == pytest.approx(expected, rel=1e-12)


def test_exponent_zero(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 0.0, {1: 5.0, 2: 1e-9, 3: 0.0, 4: 123.0})
    assert [tree.weight(k) for k in (1, 2, 3, 4)] == [1.0, 1.0, 0.0, 1.0]
    assert tree.total == 3.0
    assert tree.probability(3) == 0.0
    assert tree.probability(1) == 1.0 / 3.0
    for i in range(300):
        key, probability = tree.sample(i / 300)
        assert key != 3
        assert probability == 1.0 / 3.0


def test_update_changes_weight_and_total(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0, 2: 2.0, 3: 3.0})
    tree.update(2, 10.0)
    assert tree.weight(2) == 10.0
    assert tree.total == 14.0
    assert tree.keys() == [1, 2, 3]
    tree.update(2, 0.0)
    assert tree.weight(2) == 0.0
    assert tree.total == 4.0


def test_update_many_applies_in_order_last_wins(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0, 2: 2.0, 3: 3.0})
    tree.update_many([3, 1, 3], [5.0, 0.5, 7.0])
    assert tree.weight(1) == 0.5
    assert tree.weight(2) == 2.0
    assert tree.weight(3) == 7.0
    assert tree.total == 9.5
    tree.update_many([], [])
    assert tree.total == 9.5


def test_update_many_accepts_tuples_and_ints(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 2.0, {1: 1.0, 2: 2.0})
    tree.update_many((1, 2), (3, 4))
    assert (tree.weight(1), tree.weight(2)) == (9.0, 16.0)


def test_no_drift_after_many_updates(impl: types.SimpleNamespace) -> None:
    rng = random.Random(7)
    tree = impl.SumTree(0.7, 4)
    live: dict[int, float] = {}
    for key in range(200):
        priority = rng.random() * 100
        tree.insert(key, priority)
        live[key] = priority
    for _ in range(5000):
        key = rng.randrange(200)
        priority = rng.choice([0.0, rng.random() * 1e6, rng.random() * 1e-6])
        tree.update(key, priority)
    weights = [tree.weight(k) for k in tree.keys()]
    # Sums are recomputed from the children: exactly the fresh bottom-up total.
    assert tree.total == reference_total(weights)


# -------------------------------------------------------------------------- delete


def test_delete_moves_last_slot_into_hole(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {10: 1.0, 20: 2.0, 30: 3.0, 40: 4.0, 50: 5.0})
    tree.delete(20)
    assert tree.keys() == [10, 50, 30, 40]
    assert 20 not in tree
    assert tree.weight(50) == 5.0
    assert tree.total == 13.0
    tree.delete(40)  # the last slot: nothing moves
    assert tree.keys() == [10, 50, 30]
    tree.delete(10)
    assert tree.keys() == [30, 50]
    assert tree.total == 8.0
    tree.delete(30)
    tree.delete(50)
    assert tree.keys() == []
    assert tree.total == 0.0
    tree.insert(20, 2.0)
    assert tree.keys() == [20]
    assert tree.total == 2.0


def test_delete_keeps_sums_exact(impl: types.SimpleNamespace) -> None:
    rng = random.Random(3)
    tree = impl.SumTree(1.0, 2)
    for key in range(300):
        tree.insert(key, rng.random())
    for key in rng.sample(range(300), 150):
        tree.delete(key)
    weights = [tree.weight(k) for k in tree.keys()]
    assert len(weights) == 150
    assert tree.total == reference_total(weights)


def test_clear(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0, 2: 2.0})
    tree.clear()
    assert len(tree) == 0
    assert tree.total == 0.0
    assert tree.keys() == []
    assert 1 not in tree
    tree.insert(2, 4.0)
    assert tree.keys() == [2]
    assert tree.total == 4.0


def test_growth_past_initial_capacity(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(1.0, 1)
    for key in range(1000):
        tree.insert(key, float(key % 7))
    assert len(tree) == 1000
    assert tree.keys() == list(range(1000))
    assert tree.total == reference_total([float(k % 7) for k in range(1000)])
    for key in range(0, 1000, 3):
        tree.delete(key)
    assert len(tree) == 666
    assert tree.total == reference_total([tree.weight(k) for k in tree.keys()])


def test_large_keys(impl: types.SimpleNamespace) -> None:
    keys = [KEY_MAX, KEY_MAX - 1, 2**63, 2**63 - 1, 2**32, 0]
    tree = impl.SumTree(1.0)
    for i, key in enumerate(keys):
        tree.insert(key, float(i + 1))
    assert tree.keys() == keys
    assert all(type(k) is int for k in tree.keys())
    assert KEY_MAX in tree
    assert tree.weight(KEY_MAX) == 1.0
    tree.update(KEY_MAX, 9.0)
    assert tree.probability(KEY_MAX) == 9.0 / tree.total
    tree.delete(KEY_MAX)
    assert tree.keys() == [0, KEY_MAX - 1, 2**63, 2**63 - 1, 2**32]
    key, _ = tree.sample(0.0)
    assert type(key) is int


class LyingInt(int):
    """An int subclass whose __int__, __index__ and __repr__ lie."""

    def __int__(self) -> int:
        return 7

    def __index__(self) -> int:
        return 7

    def __repr__(self) -> str:
        return "LyingInt"


def test_int_subclass_keys_use_the_int_value(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(1.0)
    tree.insert(True, 1.0)
    tree.insert(LyingInt(3), 2.0)
    assert tree.keys() == [1, 3]
    assert all(type(k) is int for k in tree.keys())
    assert True in tree
    assert LyingInt(3) in tree
    assert LyingInt(7) not in tree
    assert tree.weight(LyingInt(3)) == 2.0
    with pytest.raises(InvalidArgumentError) as info:
        tree.insert(LyingInt(-3), 1.0)
    assert str(info.value) == "Key must be an integer in [0, 2**64), got -3."
    with pytest.raises(InvalidArgumentError) as info:
        tree.update(LyingInt(2**64), 1.0)
    assert str(info.value) == f"Key must be an integer in [0, 2**64), got {2**64}."
    tree.delete(LyingInt(3))
    assert tree.keys() == [1]


def test_contains_non_keys_is_false(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    assert "1" not in tree
    assert 1.0 not in tree
    assert -1 not in tree
    assert 2**64 not in tree
    assert None not in tree


# -------------------------------------------------------------------------- sample


def test_sample_matches_reference_algorithm(impl: types.SimpleNamespace) -> None:
    rng = random.Random(11)
    for size in (1, 2, 3, 7, 8, 31, 100):
        tree = impl.SumTree(1.0, 4)
        weights = []
        for key in range(size):
            weight = rng.choice([0.0, 0.0, rng.random(), rng.random() * 1e3, 1e-300])
            tree.insert(key, weight)
            weights.append(weight)
        for _ in range(400):
            u = rng.random()
            slot, probability = reference_sample(weights, u)
            assert tree.sample(u) == (slot, probability)
        for u in (0.0, BELOW_ONE):
            assert tree.sample(u) == reference_sample(weights, u)


def test_sample_follows_in_order_cumulative_weights(impl: types.SimpleNamespace) -> None:
    # Slots 0..4 hold weights 1..5; in-order traversal is slots 3, 1, 4, 0, 2.
    tree = filled(impl, 1.0, {100: 1.0, 101: 2.0, 102: 3.0, 103: 4.0, 104: 5.0})
    total = 15.0
    expected = [(103, 4.0), (101, 2.0), (104, 5.0), (100, 1.0), (102, 3.0)]
    start = 0.0
    for key, weight in expected:
        for frac in (0.01, 0.5, 0.99):
            u = (start + frac * weight) / total
            assert tree.sample(u) == (key, weight / total)
        start += weight


def test_zero_priority_never_sampled(impl: types.SimpleNamespace) -> None:
    rng = random.Random(5)
    for trial in range(30):
        tree = impl.SumTree(rng.choice([0.0, 0.5, 1.0, 2.0]), 2)
        zero_keys = set()
        for key in range(rng.randrange(2, 60)):
            if rng.random() < 0.7:
                tree.insert(key, 0.0)
                zero_keys.add(key)
            else:
                tree.insert(key, rng.random() * 10 ** rng.randrange(-5, 5))
        if len(zero_keys) == len(tree):
            tree.update(0, 1.0)
            zero_keys.discard(0)
        us = [rng.random() for _ in range(300)] + [0.0, BELOW_ONE, 0.5]
        for u in us:
            key, probability = tree.sample(u)
            assert key not in zero_keys
            assert probability > 0.0
            assert probability == tree.probability(key)


def test_zero_weight_last_slot_with_u_near_one(impl: types.SimpleNamespace) -> None:
    # Weights whose sum rounds: the rightmost path ends on zero weights.
    rng = random.Random(9)
    for _ in range(200):
        tree = impl.SumTree(1.0)
        n = rng.randrange(2, 40)
        for key in range(n):
            tree.insert(key, rng.choice([0.1, 0.2, 0.3, 1e-17, 1.0 / 3.0]))
        for key in rng.sample(range(n), rng.randrange(1, n)):
            tree.update(key, 0.0)
        key, probability = tree.sample(BELOW_ONE)
        assert tree.weight(key) > 0.0
        assert probability > 0.0


def test_all_zero_weights_sample_uniformly(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {7: 0.0, 8: 0.0, 9: 0.0, 10: 0.0})
    assert tree.total == 0.0
    for u, slot in [(0.0, 0), (0.24, 0), (0.25, 1), (0.5, 2), (0.74, 2), (0.75, 3)]:
        assert tree.sample(u) == ([7, 8, 9, 10][slot], 0.25)
    assert tree.sample(BELOW_ONE) == (10, 0.25)
    assert tree.probability(8) == 0.25
    tree.update(9, 2.0)
    assert tree.sample(0.0) == (9, 1.0)
    assert tree.sample(BELOW_ONE) == (9, 1.0)
    assert tree.probability(8) == 0.0


@pytest.mark.parametrize("n", [1, 3, 10, 1000])
def test_uniform_fallback_last_slot(impl: types.SimpleNamespace, n: int) -> None:
    tree = filled(impl, 1.0, dict.fromkeys(range(n), 0.0))
    assert tree.sample(BELOW_ONE) == (n - 1, 1.0 / n)
    assert tree.sample(0.0) == (0, 1.0 / n)


def test_single_key(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {42: 3.0})
    assert tree.sample(0.0) == (42, 1.0)
    assert tree.sample(0.999) == (42, 1.0)


def test_probabilities_match_frequencies(impl: types.SimpleNamespace) -> None:
    priorities = {1: 1.0, 2: 2.0, 3: 3.0, 4: 0.0, 5: 10.0}
    tree = filled(impl, 0.5, priorities)
    rng = random.Random(1)
    counts = dict.fromkeys(priorities, 0)
    draws = 20000
    for _ in range(draws):
        key, probability = tree.sample(rng.random())
        counts[key] += 1
        assert probability == tree.probability(key)
    total = sum(p**0.5 for p in priorities.values())
    for key, priority in priorities.items():
        expected = priority**0.5 / total
        assert abs(counts[key] / draws - expected) < 0.02
    assert counts[4] == 0


def test_sample_empty(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(1.0)
    with pytest.raises(UsageError) as info:
        tree.sample(0.5)
    assert str(info.value) == "Cannot sample from an empty selector."
    tree.insert(1, 1.0)
    tree.delete(1)
    with pytest.raises(UsageError):
        tree.sample(0.5)


@pytest.mark.parametrize("u", [1.0, -0.1, 1.5, float("nan"), float("inf"), -1e-300])
def test_sample_u_out_of_range(impl: types.SimpleNamespace, u: float) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    with pytest.raises(InvalidArgumentError) as info:
        tree.sample(u)
    assert str(info.value) == f"u must be in [0, 1), got {u!r}."


def test_sample_u_types(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0, 2: 1.0})
    assert tree.sample(0) == tree.sample(0.0)
    with pytest.raises(TypeError):
        tree.sample("0.5")
    with pytest.raises(TypeError):
        tree.sample(None)


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize("key", [-1, 2**64, 2**80, -(2**70)])
def test_key_out_of_range(impl: types.SimpleNamespace, key: int) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    before = snapshot(tree)
    message = f"Key must be an integer in [0, 2**64), got {key!r}."
    for call in (
        lambda: tree.insert(key, 1.0),
        lambda: tree.update(key, 1.0),
        lambda: tree.update_many([key], [1.0]),
        lambda: tree.delete(key),
        lambda: tree.probability(key),
        lambda: tree.weight(key),
    ):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert str(info.value) == message
    assert snapshot(tree) == before


@pytest.mark.parametrize("key", [1.0, "1", None, 1 + 0j, b"1"])
def test_key_not_an_integer(impl: types.SimpleNamespace, key: object) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    before = snapshot(tree)
    for call in (
        lambda: tree.insert(key, 1.0),
        lambda: tree.update(key, 1.0),
        lambda: tree.update_many([key], [1.0]),
        lambda: tree.delete(key),
        lambda: tree.probability(key),
        lambda: tree.weight(key),
    ):
        with pytest.raises(TypeError):
            call()
    assert snapshot(tree) == before


def test_duplicate_and_missing_keys(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0, 2: 2.0})
    before = snapshot(tree)
    with pytest.raises(InvalidArgumentError) as info:
        tree.insert(2, 5.0)
    assert str(info.value) == "Key 2 already exists."
    with pytest.raises(NotFoundError) as not_found:
        tree.update(3, 1.0)
    assert str(not_found.value) == "Key 3 not found."
    for call in (tree.delete, tree.probability, tree.weight):
        with pytest.raises(NotFoundError) as not_found:
            call(3)
        assert str(not_found.value) == "Key 3 not found."
    assert snapshot(tree) == before


PRIORITY_ERRORS = [
    (float("nan"), "Priority must not be NaN (key={key}, priority=nan)."),
    (-1.0, "Priority must not be negative (key={key}, priority=-1.0)."),
    (-1e-300, "Priority must not be negative (key={key}, priority=-1e-300)."),
    (float("-inf"), "Priority must not be negative (key={key}, priority=-inf)."),
    (float("inf"), "Priority must be finite (key={key}, priority=inf)."),
]


@pytest.mark.parametrize(("priority", "template"), PRIORITY_ERRORS)
def test_invalid_priorities(impl: types.SimpleNamespace, priority: float, template: str) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    before = snapshot(tree)
    with pytest.raises(InvalidArgumentError) as info:
        tree.insert(5, priority)
    assert str(info.value) == template.format(key=5)
    with pytest.raises(InvalidArgumentError) as info:
        tree.update(1, priority)
    assert str(info.value) == template.format(key=1)
    with pytest.raises(InvalidArgumentError) as info:
        tree.update_many([1], [priority])
    assert str(info.value) == template.format(key=1)
    assert snapshot(tree) == before


def test_priority_validated_before_key_existence(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    with pytest.raises(InvalidArgumentError, match="NaN"):
        tree.insert(1, float("nan"))
    with pytest.raises(InvalidArgumentError, match="NaN"):
        tree.update(2, float("nan"))


def test_weight_overflow(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 3.0, {1: 1.0})
    before = snapshot(tree)
    with pytest.raises(InvalidArgumentError) as info:
        tree.insert(2, 1e200)
    assert str(info.value) == "Priority 1e+200 of key 2 raised to the exponent 3.0 is not finite."
    with pytest.raises(InvalidArgumentError) as info:
        tree.update(1, 1e200)
    assert str(info.value) == "Priority 1e+200 of key 1 raised to the exponent 3.0 is not finite."
    assert snapshot(tree) == before
    big = sys.float_info.max
    tree.insert(3, big ** (1 / 3.0) / 2)  # finite weight is fine
    assert math.isfinite(tree.weight(3))


def test_negative_exponent_overflow(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(-2.0)
    tree.insert(1, 4.0)
    assert tree.weight(1) == 0.0625
    tiny = 5e-324
    with pytest.raises(InvalidArgumentError) as info:
        tree.insert(2, tiny)
    assert str(info.value) == "Priority 5e-324 of key 2 raised to the exponent -2.0 is not finite."


def test_nan_exponent(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(float("nan"))
    tree.insert(1, 0.0)  # weight 0 whatever the exponent
    tree.insert(2, 1.0)  # pow(1, nan) == 1
    assert tree.weight(2) == 1.0
    with pytest.raises(InvalidArgumentError) as info:
        tree.insert(3, 2.0)
    assert str(info.value) == "Priority 2.0 of key 3 raised to the exponent nan is not finite."


@pytest.mark.parametrize("priority", ["1.0", None, b"1", object()])
def test_priority_not_a_number(impl: types.SimpleNamespace, priority: object) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    before = snapshot(tree)
    with pytest.raises(TypeError):
        tree.insert(2, priority)
    with pytest.raises(TypeError):
        tree.update(1, priority)
    with pytest.raises(TypeError):
        tree.update_many([1], [priority])
    assert snapshot(tree) == before


def test_update_many_is_all_or_nothing(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0, 2: 2.0, 3: 3.0})
    before = snapshot(tree)
    with pytest.raises(InvalidArgumentError) as info:
        tree.update_many([1, 2], [1.0])
    assert str(info.value) == "keys and priorities must have the same length, got 2 and 1."
    with pytest.raises(NotFoundError) as not_found:
        tree.update_many([1, 2, 99, 3], [5.0, 5.0, 5.0, 5.0])
    assert str(not_found.value) == "Key 99 not found."
    with pytest.raises(InvalidArgumentError) as info:
        tree.update_many([1, 2, 3], [5.0, 5.0, -5.0])
    assert str(info.value) == "Priority must not be negative (key=3, priority=-5.0)."
    with pytest.raises(InvalidArgumentError):
        tree.update_many([1, 2**64], [5.0, 5.0])
    with pytest.raises(TypeError):
        tree.update_many([1, 2], [5.0, "x"])
    with pytest.raises(TypeError):
        tree.update_many(iter([1]), [5.0])
    assert snapshot(tree) == before


def test_update_many_reports_first_error(impl: types.SimpleNamespace) -> None:
    tree = filled(impl, 1.0, {1: 1.0})
    with pytest.raises(NotFoundError, match="Key 7 not found"):
        tree.update_many([7, 1], [1.0, float("nan")])
    with pytest.raises(InvalidArgumentError, match="NaN"):
        tree.update_many([1, 7], [float("nan"), 1.0])


# ------------------------------------------------------------------------ pickling


def test_pickle_round_trip(impl: types.SimpleNamespace) -> None:
    tree = impl.SumTree(0.5, 2)
    for key in range(10):
        tree.insert(key * 1000 + KEY_MAX // 2, float(key))
    tree.delete(KEY_MAX // 2 + 3000)
    copy = pickle.loads(pickle.dumps(tree))
    assert type(copy) is type(tree)
    assert snapshot(copy) == snapshot(tree)
    for u in (0.0, 0.3, 0.7, BELOW_ONE):
        assert copy.sample(u) == tree.sample(u)
    copy.insert(1, 1.0)
    assert 1 not in tree
