"""IndexedHeap (MinHeap / MaxHeap selectors), run over both twins via ``impl``."""

from __future__ import annotations

import copy
import math
import pickle
import random
from typing import Any

import pytest

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

KEY_MAX = 2**64 - 1


def _snapshot(heap: Any) -> tuple[Any, ...]:
    """Everything observable about a heap."""
    keys = heap.keys()
    top = heap.sample(0.0) if len(heap) else None
    return (keys, [heap.priority(key) for key in keys], top, len(heap), repr(heap))


def _drain(heap: Any) -> list[int]:
    """Samples and deletes until empty; returns the keys in sampling order."""
    order = []
    while len(heap):
        key, probability = heap.sample(0.5)
        assert probability == 1.0
        order.append(key)
        heap.delete(key)
    return order


def _fill(impl: Any, min_heap: bool, items: list[tuple[int, float]]) -> Any:
    heap = impl.IndexedHeap(min_heap)
    for key, priority in items:
        heap.insert(key, priority)
    return heap


# ------------------------------------------------------------------------ basics


def test_empty(impl: Any) -> None:
    heap = impl.IndexedHeap(True)
    assert len(heap) == 0
    assert heap.keys() == []
    assert 0 not in heap
    assert heap.min_heap is True
    assert impl.IndexedHeap(False).min_heap is False
    assert impl.IndexedHeap(min_heap=False).min_heap is False
    assert repr(heap) == "IndexedHeap(min_heap=True, size=0)"
    with pytest.raises(UsageError, match=r"^Cannot sample from an empty selector\.$"):
        heap.sample(0.0)


def test_repr_counts_keys(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 1.0), (2, 2.0)])
    assert repr(heap) == "IndexedHeap(min_heap=False, size=2)"


def test_min_heap_samples_smallest(impl: Any) -> None:
    heap = _fill(impl, True, [(1, 5.0), (2, -3.0), (3, 7.0), (4, 0.5)])
    assert heap.sample(0.99) == (2, 1.0)
    assert type(heap.sample(0.0)[0]) is int and type(heap.sample(0.0)[1]) is float
    assert heap.probability(2) == 1.0
    assert heap.probability(1) == heap.probability(3) == heap.probability(4) == 0.0
    assert _drain(heap) == [2, 4, 1, 3]


def test_max_heap_samples_largest(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 5.0), (2, -3.0), (3, 7.0), (4, 0.5)])
    assert heap.sample(0.0) == (3, 1.0)
    assert heap.probability(3) == 1.0 and heap.probability(1) == 0.0
    assert _drain(heap) == [3, 1, 4, 2]


def test_sample_does_not_change_anything(impl: Any) -> None:
    heap = _fill(impl, False, [(k, float(k % 3)) for k in range(20)])
    before = _snapshot(heap)
    for u in (0.0, 0.25, 0.5, 0.999999):
        assert heap.sample(u) == before[2]
    assert _snapshot(heap) == before


def test_infinities_negatives_and_zero_signs(impl: Any) -> None:
    heap = _fill(impl, True, [(1, math.inf), (2, -math.inf), (3, -0.0), (4, 0.0), (5, -1e308)])
    assert _drain(heap) == [2, 5, 3, 4, 1]
    heap = _fill(impl, False, [(1, math.inf), (2, -math.inf), (3, -0.0), (4, 0.0)])
    assert _drain(heap) == [1, 3, 4, 2]
    heap = _fill(impl, False, [(3, -0.0), (4, 0.0)])
    assert math.copysign(1.0, heap.priority(3)) == -1.0
    assert math.copysign(1.0, heap.priority(4)) == 1.0


def test_priority_returns_stored_value(impl: Any) -> None:
    for min_heap in (True, False):
        heap = _fill(impl, min_heap, [(1, 2.5), (2, -7), (3, True)])
        assert heap.priority(1) == 2.5
        assert heap.priority(2) == -7.0 and type(heap.priority(2)) is float
        assert heap.priority(3) == 1.0
        heap.update(1, 0.125)
        assert heap.priority(1) == 0.125


def test_priorities_converted_with_float(impl: Any) -> None:
    class Half:
        def __float__(self) -> float:
            return 0.5

    heap = _fill(impl, True, [(1, 1), (2, Half()), (3, 2**60)])
    assert heap.priority(2) == 0.5
    assert heap.priority(3) == float(2**60)
    assert heap.sample(0.0) == (2, 1.0)


# -------------------------------------------------------------------- tie-breaks


def test_max_heap_ties_go_to_first_inserted(impl: Any) -> None:
    heap = _fill(impl, False, [(10, 1.0), (20, 1.0), (30, 1.0)])
    for _ in range(5):
        assert heap.sample(0.3) == (10, 1.0)
    # Updating the first key (same priority) moves it behind the others.
    heap.update(10, 1.0)
    assert heap.sample(0.3) == (20, 1.0)
    assert heap.probability(20) == 1.0 and heap.probability(10) == 0.0
    assert _drain(heap) == [20, 30, 10]


def test_min_heap_ties_go_to_first_inserted(impl: Any) -> None:
    heap = _fill(impl, True, [(3, 2.0), (1, 2.0), (2, 2.0)])
    assert heap.sample(0.0) == (3, 1.0)
    heap.update(3, 2.0)
    heap.update(2, 2.0)
    assert _drain(heap) == [1, 3, 2]


def test_tie_counter_survives_delete_and_reinsert(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 4.0), (2, 4.0), (3, 4.0)])
    heap.delete(1)
    heap.insert(1, 4.0)
    assert _drain(heap) == [2, 3, 1]


def test_tie_counter_survives_clear(impl: Any) -> None:
    heap = _fill(impl, True, [(1, 0.0), (2, 0.0)])
    heap.clear()
    heap.insert(2, 0.0)
    heap.insert(1, 0.0)
    assert heap.sample(0.0) == (2, 1.0)


def test_many_ties_sample_in_update_order(impl: Any) -> None:
    rng = random.Random(5)
    heap = impl.IndexedHeap(False)
    keys = list(range(200))
    rng.shuffle(keys)
    for key in keys:
        heap.insert(key, 9.0)
    order = keys[:]
    for key in rng.sample(keys, 50):
        heap.update(key, 9.0)
        order.remove(key)
        order.append(key)
    assert _drain(heap) == order


# ----------------------------------------------------------------------- updates


def test_update_moves_up_and_down(impl: Any) -> None:
    heap = _fill(impl, True, [(k, float(k)) for k in range(1, 32)])
    heap.update(31, -1.0)  # from the bottom to the top
    assert heap.sample(0.0) == (31, 1.0)
    heap.update(31, 100.0)  # from the top to the bottom
    assert heap.sample(0.0) == (1, 1.0)
    heap.update(16, 0.5)  # middle moves up
    heap.update(1, 16.5)  # top moves to the middle
    assert _drain(heap) == [
        16,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
        13,
        14,
        15,
        1,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        26,
        27,
        28,
        29,
        30,
        31,
    ]


def test_update_many_applies_in_order_last_wins(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 1.0), (2, 2.0), (3, 3.0)])
    heap.update_many([1, 3, 1], [10.0, 0.0, 5.0])
    assert heap.priority(1) == 5.0 and heap.priority(3) == 0.0
    assert _drain(heap) == [1, 2, 3]


def test_update_many_counts_each_entry_for_ties(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 0.0), (2, 0.0), (3, 0.0)])
    heap.update_many((3, 1), (7.0, 7.0))
    assert _drain(heap) == [3, 1, 2]


def test_update_many_accepts_any_sequences(impl: Any) -> None:
    heap = _fill(impl, True, [(1, 1.0), (2, 2.0)])
    heap.update_many((2,), [0])
    heap.update_many([], ())
    heap.update_many(range(1, 2), (0.5,))
    assert heap.priority(2) == 0.0 and heap.priority(1) == 0.5


def test_delete_from_the_middle(impl: Any) -> None:
    rng = random.Random(2)
    items = [(k, float(rng.randint(0, 50))) for k in range(64)]
    for min_heap in (True, False):
        heap = _fill(impl, min_heap, items)
        for key in (40, 5, 17, 63, 0, 33):
            heap.delete(key)
            assert key not in heap
            with pytest.raises(NotFoundError):
                heap.priority(key)
        remaining = {k: p for k, p in items if k not in (40, 5, 17, 63, 0, 33)}
        expected = sorted(remaining, key=lambda k: (remaining[k] * (1 if min_heap else -1), k))
        assert sorted(heap.keys()) == sorted(remaining)
        assert _drain(heap) == expected


def test_clear(impl: Any) -> None:
    heap = _fill(impl, True, [(1, 1.0), (2, 2.0)])
    heap.clear()
    assert len(heap) == 0 and heap.keys() == [] and 1 not in heap
    heap.insert(1, 3.0)
    assert heap.sample(0.0) == (1, 1.0)


def test_large_keys(impl: Any) -> None:
    keys = [KEY_MAX, KEY_MAX - 1, 2**63, 2**63 - 1, 0]
    heap = _fill(impl, True, [(key, float(i)) for i, key in enumerate(keys)])
    assert all(key in heap for key in keys)
    assert sorted(heap.keys()) == sorted(keys)
    assert heap.sample(0.0) == (KEY_MAX, 1.0)
    heap.update(KEY_MAX, 10.0)
    assert heap.sample(0.0) == (KEY_MAX - 1, 1.0)
    assert heap.priority(KEY_MAX) == 10.0
    assert _drain(heap) == keys[1:] + [KEY_MAX]


def test_contains(impl: Any) -> None:
    heap = _fill(impl, True, [(1, 1.0), (KEY_MAX, 1.0)])
    assert 1 in heap and True in heap and KEY_MAX in heap
    assert 2 not in heap and 0 not in heap and False not in heap
    for other in (-1, 2**64, "1", 1.0, None, [1]):
        assert other not in heap


def test_int_subclass_keys_are_plain_ints(impl: Any) -> None:
    heap = _fill(impl, True, [(True, 1.0)])
    assert heap.keys() == [1] and type(heap.keys()[0]) is int
    assert type(heap.sample(0.0)[0]) is int


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize("key", [-1, 2**64, 2**100, -(2**64)])
def test_key_out_of_range(impl: Any, key: int) -> None:
    heap = _fill(impl, True, [(1, 1.0)])
    before = _snapshot(heap)
    message = f"^Key must be an integer in \\[0, 2\\*\\*64\\), got {key}\\.$"
    for call in (
        lambda: heap.insert(key, 1.0),
        lambda: heap.update(key, 1.0),
        lambda: heap.update_many([1, key], [1.0, 1.0]),
        lambda: heap.delete(key),
        lambda: heap.probability(key),
        lambda: heap.priority(key),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            call()
    assert _snapshot(heap) == before


@pytest.mark.parametrize("key", ["1", 1.0, None, b"1", [1]])
def test_key_not_an_int(impl: Any, key: object) -> None:
    heap = _fill(impl, True, [(1, 1.0)])
    before = _snapshot(heap)
    for call in (
        lambda: heap.insert(key, 1.0),
        lambda: heap.update(key, 1.0),
        lambda: heap.update_many([1, key], [2.0, 1.0]),
        lambda: heap.delete(key),
        lambda: heap.probability(key),
        lambda: heap.priority(key),
    ):
        with pytest.raises(TypeError, match=r"^Key must be an integer, got "):
            call()
    assert _snapshot(heap) == before


@pytest.mark.parametrize("priority", ["1.0", b"1", None, [1.0], 1j, object()])
def test_priority_not_a_number(impl: Any, priority: object) -> None:
    heap = _fill(impl, False, [(1, 1.0)])
    before = _snapshot(heap)
    for call in (
        lambda: heap.insert(2, priority),
        lambda: heap.update(1, priority),
        lambda: heap.update_many([1, 1], [2.0, priority]),
    ):
        with pytest.raises(TypeError):
            call()
    assert _snapshot(heap) == before


def test_nan_priority_refused(impl: Any) -> None:
    heap = _fill(impl, True, [(1, 1.0)])
    before = _snapshot(heap)
    message = r"^Priority must not be NaN \(key=7, priority=nan\)\.$"
    with pytest.raises(InvalidArgumentError, match=message):
        heap.insert(7, math.nan)
    with pytest.raises(InvalidArgumentError, match=r"\(key=1, priority=nan\)"):
        heap.update(1, float("nan"))
    with pytest.raises(InvalidArgumentError, match=r"\(key=1, priority=nan\)"):
        heap.update_many([1, 1], [0.0, math.nan])
    assert _snapshot(heap) == before
    assert 7 not in heap


def test_duplicate_insert(impl: Any) -> None:
    heap = _fill(impl, False, [(5, 1.0), (KEY_MAX, 2.0)])
    before = _snapshot(heap)
    with pytest.raises(InvalidArgumentError, match=r"^Key 5 already exists\.$"):
        heap.insert(5, 100.0)
    with pytest.raises(InvalidArgumentError, match=f"^Key {KEY_MAX} already exists\\.$"):
        heap.insert(KEY_MAX, 0.0)
    assert _snapshot(heap) == before


def test_missing_key(impl: Any) -> None:
    heap = _fill(impl, True, [(5, 1.0)])
    before = _snapshot(heap)
    for call in (
        lambda: heap.update(6, 1.0),
        lambda: heap.delete(6),
        lambda: heap.probability(6),
        lambda: heap.priority(6),
        lambda: heap.update_many([5, 6], [0.0, 0.0]),
    ):
        with pytest.raises(NotFoundError, match=r"^Key 6 not found\.$"):
            call()
    assert _snapshot(heap) == before
    heap.delete(5)
    with pytest.raises(NotFoundError, match=r"^Key 5 not found\.$"):
        heap.delete(5)


def test_update_many_is_all_or_nothing(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 1.0), (2, 2.0), (3, 3.0)])
    before = _snapshot(heap)
    bad_calls: list[tuple[list[Any], list[Any], type[Exception]]] = [
        ([3, 1, 99], [0.0, 9.0, 1.0], NotFoundError),  # the bad entry comes last
        ([1, 2, 3], [9.0, math.nan, 1.0], InvalidArgumentError),
        ([1, 2, -5], [9.0, 9.0, 1.0], InvalidArgumentError),
        ([1, "2"], [9.0, 9.0], TypeError),
        ([1, 2], [9.0, "9"], TypeError),
        ([1, 2], [9.0], InvalidArgumentError),
    ]
    for keys, priorities, error in bad_calls:
        with pytest.raises(error):
            heap.update_many(keys, priorities)
        assert _snapshot(heap) == before
    with pytest.raises(
        InvalidArgumentError,
        match=r"^keys and priorities must have the same length, got 2 and 1\.$",
    ):
        heap.update_many([1, 2], [9.0])
    # Entries are validated in order: the first bad one is reported.
    with pytest.raises(NotFoundError, match=r"^Key 98 not found\.$"):
        heap.update_many([98, 1, 99], [1.0, 1.0, 1.0])
    # Nothing was applied, not even the tie counter: the original tie order holds.
    heap.update_many([1, 2, 3], [0.0, 0.0, 0.0])
    assert _drain(heap) == [1, 2, 3]


def test_failed_insert_does_not_advance_tie_counter(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 1.0)])
    with pytest.raises(InvalidArgumentError):
        heap.insert(1, 1.0)
    heap.insert(2, 1.0)
    assert _drain(heap) == [1, 2]


# ---------------------------------------------------------------- bigger checks


@pytest.mark.parametrize("min_heap", [True, False])
def test_random_operations_against_a_model(impl: Any, min_heap: bool) -> None:
    rng = random.Random(17 + min_heap)
    heap = impl.IndexedHeap(min_heap)
    sign = 1.0 if min_heap else -1.0
    model: dict[int, tuple[float, int]] = {}
    counter = 0
    for _ in range(3000):
        roll = rng.random()
        key = rng.randrange(60)
        priority = float(rng.randint(-3, 3))
        if roll < 0.4 and key not in model:
            heap.insert(key, priority)
            model[key] = (sign * priority, counter)
            counter += 1
        elif roll < 0.7 and key in model:
            heap.update(key, priority)
            model[key] = (sign * priority, counter)
            counter += 1
        elif roll < 0.9 and key in model:
            heap.delete(key)
            del model[key]
        assert len(heap) == len(model)
        if model:
            top = min(model, key=model.__getitem__)
            assert heap.sample(rng.random()) == (top, 1.0)
            assert heap.probability(top) == 1.0


def test_copy_and_pickle(impl: Any) -> None:
    heap = _fill(impl, False, [(1, 1.0), (2, 1.0), (3, 0.5), (KEY_MAX, -2.0)])
    heap.update(1, 1.0)
    for clone in (copy.deepcopy(heap), pickle.loads(pickle.dumps(heap)), copy.copy(heap)):
        assert type(clone) is type(heap)
        assert _snapshot(clone) == _snapshot(heap)
        # The tie counter came along: a new tie lands behind the copied ones.
        clone.insert(4, 1.0)
        assert _drain(clone) == [2, 1, 4, 3, KEY_MAX]
    assert _snapshot(heap)[0] == heap.keys()  # the original is untouched
    assert len(heap) == 4


def test_priority_conversion_that_mutates_the_heap_does_not_corrupt_it(impl: Any) -> None:
    heap = _fill(impl, True, [(k, float(k)) for k in range(10)])

    class Meddler:
        def __float__(self) -> float:
            for key in range(10):
                if key in heap:
                    heap.delete(key)
            heap.insert(42, 0.0)
            return 1.0

    with pytest.raises(NotFoundError, match=r"^Key 3 not found\.$"):
        heap.update_many([3, 4], [Meddler(), 2.0])
    assert heap.keys() == [42] and heap.sample(0.0) == (42, 1.0)
