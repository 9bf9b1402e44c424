"""OrderedKeys (Fifo / Lifo selectors), run over both twins via ``impl``."""

from __future__ import annotations

import copy
import math
import pickle
import random
from typing import Any

import pytest

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

KEY_MAX = 2**64 - 1


def _snapshot(keys: Any) -> tuple[Any, ...]:
    """Everything observable about an OrderedKeys."""
    order = keys.keys()
    top = keys.sample(0.0) if len(keys) else None
    return (order, top, len(keys), repr(keys), [keys.probability(key) for key in order])


def _fill(impl: Any, lifo: bool, keys: list[int]) -> Any:
    ordered = impl.OrderedKeys(lifo)
    for key in keys:
        ordered.insert(key, 1.0)
    return ordered


def _drain(ordered: Any) -> list[int]:
    order = []
    while len(ordered):
        key, probability = ordered.sample(0.5)
        assert probability == 1.0
        assert ordered.probability(key) == 1.0
        order.append(key)
        ordered.delete(key)
    return order


# ------------------------------------------------------------------------ basics


def test_empty(impl: Any) -> None:
    for lifo in (False, True):
        ordered = impl.OrderedKeys(lifo)
        assert ordered.lifo is lifo
        assert len(ordered) == 0 and ordered.keys() == [] and 0 not in ordered
        assert repr(ordered) == f"OrderedKeys(lifo={lifo}, size=0)"
        with pytest.raises(UsageError, match=r"^Cannot sample from an empty selector\.$"):
            ordered.sample(0.0)
    assert impl.OrderedKeys(lifo=True).lifo is True


def test_fifo_samples_oldest(impl: Any) -> None:
    ordered = _fill(impl, False, [5, 3, 9, 1])
    assert ordered.sample(0.9) == (5, 1.0)
    assert type(ordered.sample(0.0)[0]) is int and type(ordered.sample(0.0)[1]) is float
    assert ordered.probability(5) == 1.0
    assert ordered.probability(3) == ordered.probability(9) == ordered.probability(1) == 0.0
    assert repr(ordered) == "OrderedKeys(lifo=False, size=4)"
    assert _drain(ordered) == [5, 3, 9, 1]


def test_lifo_samples_newest(impl: Any) -> None:
    ordered = _fill(impl, True, [5, 3, 9, 1])
    assert ordered.sample(0.1) == (1, 1.0)
    assert ordered.probability(1) == 1.0 and ordered.probability(5) == 0.0
    assert _drain(ordered) == [1, 9, 3, 5]


def test_keys_in_insertion_order_for_both_modes(impl: Any) -> None:
    for lifo in (False, True):
        ordered = _fill(impl, lifo, [4, 2, KEY_MAX, 0, 7])
        assert ordered.keys() == [4, 2, KEY_MAX, 0, 7]
        assert all(type(key) is int for key in ordered.keys())


def test_sample_does_not_change_anything(impl: Any) -> None:
    ordered = _fill(impl, False, [1, 2, 3])
    before = _snapshot(ordered)
    for u in (0.0, 0.5, 0.99):
        assert ordered.sample(u) == (1, 1.0)
    assert _snapshot(ordered) == before


def test_fifo_after_deletes(impl: Any) -> None:
    ordered = _fill(impl, False, list(range(10)))
    ordered.delete(0)  # the oldest
    assert ordered.sample(0.0) == (1, 1.0)
    ordered.delete(5)  # the middle
    ordered.delete(9)  # the newest
    assert ordered.keys() == [1, 2, 3, 4, 6, 7, 8]
    ordered.insert(0, 1.0)  # reinserted keys go to the back
    assert ordered.keys() == [1, 2, 3, 4, 6, 7, 8, 0]
    assert _drain(ordered) == [1, 2, 3, 4, 6, 7, 8, 0]


def test_lifo_after_deletes(impl: Any) -> None:
    ordered = _fill(impl, True, list(range(10)))
    ordered.delete(9)
    assert ordered.sample(0.0) == (8, 1.0)
    ordered.delete(0)
    ordered.delete(4)
    ordered.insert(4, 1.0)
    assert ordered.sample(0.0) == (4, 1.0)
    assert _drain(ordered) == [4, 8, 7, 6, 5, 3, 2, 1]


def test_fifo_front_deletes_at_scale(impl: Any) -> None:
    """A queue that slides far: the oldest key stays right after many front deletes."""
    ordered = impl.OrderedKeys(False)
    for key in range(2000):
        ordered.insert(key, 0.0)
    for key in range(2000, 60000):
        assert ordered.sample(0.0) == (key - 2000, 1.0)
        ordered.delete(key - 2000)
        ordered.insert(key, 0.0)
    assert len(ordered) == 2000
    assert ordered.keys() == list(range(58000, 60000))


def test_updates_do_not_reorder(impl: Any) -> None:
    for lifo in (False, True):
        ordered = _fill(impl, lifo, [3, 1, 2])
        before = _snapshot(ordered)
        ordered.update(3, 100.0)
        ordered.update(2, -100.0)
        ordered.update(1, math.nan)
        ordered.update_many([2, 3, 2], [1e9, -math.inf, 0])
        assert _snapshot(ordered) == before


def test_priorities_accepted_and_ignored(impl: Any) -> None:
    class Half:
        def __float__(self) -> float:
            return 0.5

    ordered = impl.OrderedKeys(False)
    for key, priority in enumerate([1, -1.0, math.nan, math.inf, True, Half(), 2**70]):
        ordered.insert(key, priority)
    assert ordered.keys() == list(range(7))


def test_clear(impl: Any) -> None:
    ordered = _fill(impl, True, [1, 2, 3])
    ordered.clear()
    assert len(ordered) == 0 and ordered.keys() == [] and 1 not in ordered
    ordered.insert(2, 0.0)
    ordered.insert(1, 0.0)
    assert ordered.keys() == [2, 1] and ordered.sample(0.0) == (1, 1.0)


def test_large_keys(impl: Any) -> None:
    keys = [KEY_MAX, 2**63, KEY_MAX - 1, 2**63 - 1, 0]
    for lifo in (False, True):
        ordered = _fill(impl, lifo, keys)
        assert all(key in ordered for key in keys)
        assert ordered.sample(0.0) == ((0 if lifo else KEY_MAX), 1.0)
        ordered.delete(KEY_MAX)
        assert KEY_MAX not in ordered and KEY_MAX - 1 in ordered
        assert _drain(ordered) == (
            [0, 2**63 - 1, KEY_MAX - 1, 2**63] if lifo else [2**63, KEY_MAX - 1, 2**63 - 1, 0]
        )


def test_contains(impl: Any) -> None:
    ordered = _fill(impl, False, [1, KEY_MAX])
    assert 1 in ordered and True in ordered and KEY_MAX in ordered
    assert 0 not in ordered and False not in ordered
    for other in (-1, 2**64, "1", 1.0, None, [1]):
        assert other not in ordered


def test_int_subclass_keys_are_plain_ints(impl: Any) -> None:
    ordered = _fill(impl, False, [True])
    assert ordered.keys() == [1] and type(ordered.keys()[0]) is int
    assert type(ordered.sample(0.0)[0]) is int


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize("key", [-1, 2**64, 2**100])
def test_key_out_of_range(impl: Any, key: int) -> None:
    ordered = _fill(impl, False, [1])
    before = _snapshot(ordered)
    message = f"^Key must be an integer in \\[0, 2\\*\\*64\\), got {key}\\.$"
    for call in (
        lambda: ordered.insert(key, 1.0),
        lambda: ordered.update(key, 1.0),
        lambda: ordered.update_many([1, key], [1.0, 1.0]),
        lambda: ordered.delete(key),
        lambda: ordered.probability(key),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            call()
    assert _snapshot(ordered) == before


@pytest.mark.parametrize("key", ["1", 1.0, None, [1]])
def test_key_not_an_int(impl: Any, key: object) -> None:
    ordered = _fill(impl, True, [1])
    before = _snapshot(ordered)
    for call in (
        lambda: ordered.insert(key, 1.0),
        lambda: ordered.update(key, 1.0),
        lambda: ordered.update_many([1, key], [1.0, 1.0]),
        lambda: ordered.delete(key),
        lambda: ordered.probability(key),
    ):
        with pytest.raises(TypeError, match=r"^Key must be an integer, got "):
            call()
    assert _snapshot(ordered) == before


@pytest.mark.parametrize("priority", ["1.0", b"1", None, [1.0], 1j])
def test_priority_not_a_number(impl: Any, priority: object) -> None:
    ordered = _fill(impl, False, [1])
    before = _snapshot(ordered)
    for call in (
        lambda: ordered.insert(2, priority),
        lambda: ordered.update(1, priority),
        lambda: ordered.update_many([1, 1], [1.0, priority]),
    ):
        with pytest.raises(TypeError):
            call()
    assert _snapshot(ordered) == before
    assert 2 not in ordered


def test_duplicate_insert(impl: Any) -> None:
    ordered = _fill(impl, False, [5, KEY_MAX, 6])
    before = _snapshot(ordered)
    with pytest.raises(InvalidArgumentError, match=r"^Key 5 already exists\.$"):
        ordered.insert(5, 1.0)
    with pytest.raises(InvalidArgumentError, match=f"^Key {KEY_MAX} already exists\\.$"):
        ordered.insert(KEY_MAX, 1.0)
    assert _snapshot(ordered) == before  # in particular 5 did not move to the back


def test_missing_key(impl: Any) -> None:
    ordered = _fill(impl, True, [5])
    before = _snapshot(ordered)
    for call in (
        lambda: ordered.update(6, 1.0),
        lambda: ordered.delete(6),
        lambda: ordered.probability(6),
        lambda: ordered.update_many([5, 6], [0.0, 0.0]),
    ):
        with pytest.raises(NotFoundError, match=r"^Key 6 not found\.$"):
            call()
    assert _snapshot(ordered) == before
    ordered.delete(5)
    with pytest.raises(NotFoundError, match=r"^Key 5 not found\.$"):
        ordered.delete(5)


def test_update_many_validates_everything(impl: Any) -> None:
    ordered = _fill(impl, False, [1, 2, 3])
    before = _snapshot(ordered)
    with pytest.raises(
        InvalidArgumentError,
        match=r"^keys and priorities must have the same length, got 3 and 2\.$",
    ):
        ordered.update_many([1, 2, 3], [0.0, 0.0])
    with pytest.raises(NotFoundError, match=r"^Key 98 not found\.$"):
        ordered.update_many([1, 98, 99], [0.0, 0.0, 0.0])
    with pytest.raises(TypeError):
        ordered.update_many([1, 2, 3], [0.0, 0.0, "x"])
    with pytest.raises(InvalidArgumentError):
        ordered.update_many([1, 2, -3], [0.0, 0.0, 0.0])
    assert _snapshot(ordered) == before


# ---------------------------------------------------------------- bigger checks


@pytest.mark.parametrize("lifo", [False, True])
def test_random_operations_against_a_model(impl: Any, lifo: bool) -> None:
    rng = random.Random(23 + lifo)
    ordered = impl.OrderedKeys(lifo)
    model: list[int] = []
    for _ in range(3000):
        key = rng.randrange(80)
        if rng.random() < 0.55:
            if key in model:
                with pytest.raises(InvalidArgumentError):
                    ordered.insert(key, 0.0)
            else:
                ordered.insert(key, rng.random())
                model.append(key)
        elif key in model:
            ordered.delete(key)
            model.remove(key)
        assert len(ordered) == len(model)
        if model:
            assert ordered.sample(rng.random()) == (model[-1] if lifo else model[0], 1.0)
    assert ordered.keys() == model


def test_copy_and_pickle(impl: Any) -> None:
    for lifo in (False, True):
        ordered = _fill(impl, lifo, [3, KEY_MAX, 1, 2])
        ordered.delete(1)
        for clone in (
            copy.deepcopy(ordered),
            pickle.loads(pickle.dumps(ordered)),
            copy.copy(ordered),
        ):
            assert type(clone) is type(ordered)
            assert _snapshot(clone) == _snapshot(ordered)
            clone.insert(1, 0.0)
            assert 1 not in ordered
        assert ordered.keys() == [3, KEY_MAX, 2]


def test_priority_conversion_that_mutates_the_keys_does_not_corrupt_them(impl: Any) -> None:
    ordered = _fill(impl, False, list(range(10)))

    class Meddler:
        def __float__(self) -> float:
            for key in range(10):
                if key in ordered:
                    ordered.delete(key)
            return 1.0

    ordered.insert(10, Meddler())
    assert ordered.keys() == [10] and ordered.sample(0.0) == (10, 1.0)

    class Remover:
        def __float__(self) -> float:
            ordered.delete(10)
            return 1.0

    # The key is checked after its priority is converted.
    with pytest.raises(NotFoundError, match=r"^Key 10 not found\.$"):
        ordered.update_many([10], [Remover()])
    assert ordered.keys() == []
