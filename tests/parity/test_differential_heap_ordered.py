"""Differential tests: the pure and compiled IndexedHeap / OrderedKeys agree bit for bit.

Seeded random operation streams (valid and invalid calls, many tied priorities) run on
both twins side by side; every result, every exception (type and message) and the
internal order (``keys()``) must match. A small reference model is checked along the way
so that the two twins cannot agree on a wrong answer.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import math
import operator
import pickle
import random
import types
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import compiled_module

KEY_MAX = 2**64 - 1


def _twins(module_name: str) -> tuple[types.ModuleType, types.ModuleType]:
    """Returns the pure and the compiled module, or skips (fails when required)."""
    compiled = compiled_module(module_name)
    return importlib.import_module(f"reverb_py._pure.{module_name}"), compiled


@pytest.fixture
def heaps() -> tuple[type, type]:
    pure, compiled = _twins("indexed_heap")
    return pure.IndexedHeap, compiled.IndexedHeap


@pytest.fixture
def ordered() -> tuple[type, type]:
    pure, compiled = _twins("ordered_keys")
    return pure.OrderedKeys, compiled.OrderedKeys


def _outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """Runs ``call``; returns ("ok", result) or ("error", type, message)."""
    try:
        result = call()
    except Exception as error:  # noqa: BLE001 - every error is part of the comparison
        return ("error", type(error), str(error))
    return ("ok", result)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Exact comparison of two outcomes; floats compared by their bits (NaN, -0.0)."""
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a == b
    return _bitwise_equal(a[1], b[1])


def _bitwise_equal(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, float):
        return math.copysign(1.0, x) == math.copysign(1.0, y) and (x == y or (x != x and y != y))
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(_bitwise_equal(p, q) for p, q in zip(x, y))
    return bool(x == y)


# ------------------------------------------------------------------------ generators


class _OddInt(int):
    """An int subclass whose __int__ and __repr__ lie: twins must use the int value."""

    def __int__(self) -> int:
        return 7

    def __repr__(self) -> str:
        return "OddInt"


INVALID_KEYS: list[object] = [
    _OddInt(-3),
    _OddInt(2**64),
    -1,
    2**64,
    2**70,
    -(2**64),
    "3",
    1.0,
    None,
    b"1",
    [1],
]
INVALID_PRIORITIES: list[object] = ["1.0", b"1", None, [1.0], object(), 10**400, 1j]


class _Stream:
    """Random arguments for one operation stream."""

    def __init__(self, seed: int, key_range: int, big_keys: bool) -> None:
        self.rng = random.Random(seed)
        self.keys: list[int] = list(range(key_range))
        if big_keys:
            self.keys += [KEY_MAX - i for i in range(8)] + [2**63 + i for i in range(-2, 3)]
        self.tied = [0.0, -0.0, 1.0, 1.0, 2.0, -1.0, 5, True, math.inf, -math.inf, 3.5]

    def key(self) -> object:
        rng = self.rng
        if rng.random() < 0.03:
            return rng.choice(INVALID_KEYS)
        key = rng.choice(self.keys)
        if key == 1 and rng.random() < 0.1:
            return True
        return _OddInt(key) if rng.random() < 0.03 else key

    def priority(self, allow_invalid: bool = True) -> object:
        rng = self.rng
        roll = rng.random()
        if allow_invalid and roll < 0.02:
            return rng.choice(INVALID_PRIORITIES)
        if allow_invalid and roll < 0.04:
            return math.nan
        if roll < 0.7:
            return rng.choice(self.tied)
        return rng.uniform(-100.0, 100.0)


def _compare(pure: Any, compiled: Any, label: str) -> None:
    """Checks the full observable state of both twins."""
    assert pure.keys() == compiled.keys(), label
    assert len(pure) == len(compiled), label
    assert repr(pure) == repr(compiled), label


# ------------------------------------------------------------------------ IndexedHeap


class _HeapModel:
    """Reference model: a dict key -> (signed priority, counter, priority)."""

    def __init__(self, min_heap: bool) -> None:
        self.sign = 1.0 if min_heap else -1.0
        self.counter = 0
        self.entries: dict[int, tuple[float, int, float]] = {}

    def set(self, key: int, priority: float) -> None:
        self.entries[key] = (self.sign * priority, self.counter, priority)
        self.counter += 1

    def top(self) -> int:
        return min(self.entries, key=lambda k: self.entries[k][:2])


def _run_heap_stream(
    pure_cls: type, compiled_cls: type, seed: int, n_ops: int, key_range: int, full_every: int
) -> dict[str, int]:
    rng_stream = _Stream(seed, key_range, big_keys=True)
    rng = rng_stream.rng
    min_heap = bool(seed % 2)
    pure = pure_cls(min_heap)
    compiled = compiled_cls(min_heap)
    model = _HeapModel(min_heap)
    stats = {"ok": 0, "error": 0, "samples": 0}
    for step in range(n_ops):
        roll = rng.random()
        op: str
        args: tuple[Any, ...]
        if roll < 0.32:
            op, args = "insert", (rng_stream.key(), rng_stream.priority())
        elif roll < 0.50:
            op, args = "update", (rng_stream.key(), rng_stream.priority())
        elif roll < 0.58:
            size = rng.randint(0, 6)
            present = pure.keys()
            keys = [
                rng.choice(present) if present and rng.random() < 0.9 else rng_stream.key()
                for _ in range(size)
            ]
            priorities = [
                rng_stream.priority(allow_invalid=rng.random() < 0.3) for _ in range(size)
            ]
            if rng.random() < 0.03:
                priorities.append(1.0)  # length mismatch
            if rng.random() < 0.3:
                keys_arg: Any = tuple(keys)
            else:
                keys_arg = keys
            op, args = "update_many", (keys_arg, priorities)
        elif roll < 0.74:
            present = pure.keys()
            key = rng.choice(present) if present and rng.random() < 0.8 else rng_stream.key()
            op, args = "delete", (key,)
        elif roll < 0.86:
            op, args = "sample", (rng.random(),)
        elif roll < 0.91:
            op, args = "probability", (rng_stream.key(),)
        elif roll < 0.96:
            op, args = "priority", (rng_stream.key(),)
        elif roll < 0.995:
            op, args = "__contains__", (rng_stream.key(),)
        else:
            op, args = "clear", ()
        before = pure.keys()
        got_pure = _outcome(lambda: getattr(pure, op)(*args))
        got_compiled = _outcome(lambda: getattr(compiled, op)(*args))
        label = f"seed={seed} step={step} op={op}{args!r}: {got_pure!r} vs {got_compiled!r}"
        assert _same(got_pure, got_compiled), label
        stats[got_pure[0]] += 1
        if got_pure[0] == "error":
            assert pure.keys() == before, label  # an error changes nothing
        else:
            _apply_heap_model(model, op, args)
        if op == "sample" and got_pure[0] == "ok":
            stats["samples"] += 1
            assert got_pure[1] == (model.top(), 1.0), label
        elif op == "sample":
            assert not model.entries, label
        if step % full_every == 0 or op == "clear":
            _compare(pure, compiled, label)
            assert sorted(pure.keys()) == sorted(model.entries), label
            for key in pure.keys():
                assert _bitwise_equal(pure.priority(key), compiled.priority(key)), label
                assert _bitwise_equal(pure.priority(key), float(model.entries[key][2])), label
    _compare(pure, compiled, f"seed={seed} end")
    return stats


def _apply_heap_model(model: _HeapModel, op: str, args: tuple[Any, ...]) -> None:
    if op in ("insert", "update"):
        model.set(operator.index(args[0]), float(args[1]))  # type: ignore[arg-type]
    elif op == "update_many":
        for key, priority in zip(*args):
            model.set(operator.index(key), float(priority))
    elif op == "delete":
        del model.entries[operator.index(args[0])]
    elif op == "clear":
        model.entries.clear()


@pytest.mark.parametrize("seed", range(8))
def test_heap_streams_small_key_range(heaps: tuple[type, type], seed: int) -> None:
    stats = _run_heap_stream(*heaps, seed=seed, n_ops=10000, key_range=24, full_every=1)
    # The stream really exercises both outcomes and sampling.
    assert stats["ok"] > 1000 and stats["error"] > 200 and stats["samples"] > 200


@pytest.mark.parametrize("seed", range(100, 104))
def test_heap_streams_large_key_range(heaps: tuple[type, type], seed: int) -> None:
    stats = _run_heap_stream(*heaps, seed=seed, n_ops=20000, key_range=3000, full_every=97)
    assert stats["ok"] > 3000


@pytest.mark.parametrize("min_heap", [True, False])
def test_heap_bulk_ties_then_drain(heaps: tuple[type, type], min_heap: bool) -> None:
    """Thousands of keys on a few priorities, shuffled updates, drained by sampling."""
    pure_cls, compiled_cls = heaps
    rng = random.Random(7 + min_heap)
    pure, compiled = pure_cls(min_heap), compiled_cls(min_heap)
    keys = rng.sample(range(KEY_MAX - 10**6, KEY_MAX + 1), 3000)
    for key in keys:
        priority = float(rng.randint(0, 4))
        pure.insert(key, priority)
        compiled.insert(key, priority)
    for _ in range(20):
        batch = rng.sample(keys, 100) + rng.sample(keys, 20)
        priorities = [float(rng.randint(0, 4)) for _ in batch]
        pure.update_many(batch, priorities)
        compiled.update_many(batch, priorities)
        assert pure.keys() == compiled.keys()
    drained_pure, drained_compiled = [], []
    while len(pure):
        key, probability = pure.sample(0.5)
        assert (key, probability) == compiled.sample(0.5)
        drained_pure.append((pure.priority(key), key))
        drained_compiled.append((compiled.priority(key), key))
        pure.delete(key)
        compiled.delete(key)
        assert pure.keys() == compiled.keys()
    assert drained_pure == drained_compiled
    priorities = [priority for priority, _ in drained_pure]
    assert priorities == sorted(priorities, reverse=not min_heap)


def test_heap_pickle_state_is_interchangeable(heaps: tuple[type, type]) -> None:
    pure_cls, compiled_cls = heaps
    rng = random.Random(3)
    pure, compiled = pure_cls(False), compiled_cls(False)
    for key in range(200):
        priority = float(rng.randint(0, 3))
        pure.insert(key, priority)
        compiled.insert(key, priority)
    for key in range(0, 200, 3):
        pure.update(key, 1.0)
        compiled.update(key, 1.0)
    assert pure.__reduce__()[1:] == compiled.__reduce__()[1:]
    clones = [pickle.loads(pickle.dumps(pure)), copy.deepcopy(compiled)]
    # A compiled heap restored from the pure twin's state (and vice versa).
    crossed_compiled = compiled_cls(False)
    crossed_compiled.__setstate__(pure.__reduce__()[2])
    crossed_pure = pure_cls(False)
    crossed_pure.__setstate__(compiled.__reduce__()[2])
    everyone = [pure, compiled, *clones, crossed_compiled, crossed_pure]
    for step in range(300):
        key = rng.randrange(200)
        priority = float(rng.randint(0, 3))
        results = {repr((heap.update(key, priority), heap.sample(0.0))) for heap in everyone}
        assert len(results) == 1, step
        assert len({tuple(heap.keys()) for heap in everyone}) == 1, step


# ------------------------------------------------------------------------ OrderedKeys


def _run_ordered_stream(
    pure_cls: type, compiled_cls: type, seed: int, n_ops: int, key_range: int, full_every: int
) -> dict[str, int]:
    stream = _Stream(seed, key_range, big_keys=True)
    rng = stream.rng
    lifo = bool(seed % 2)
    pure = pure_cls(lifo)
    compiled = compiled_cls(lifo)
    model: list[int] = []
    stats = {"ok": 0, "error": 0, "samples": 0}
    for step in range(n_ops):
        roll = rng.random()
        op: str
        args: tuple[Any, ...]
        if roll < 0.35:
            op, args = "insert", (stream.key(), stream.priority())
        elif roll < 0.45:
            op, args = "update", (stream.key(), stream.priority())
        elif roll < 0.52:
            size = rng.randint(0, 6)
            keys = [
                rng.choice(model) if model and rng.random() < 0.9 else stream.key()
                for _ in range(size)
            ]
            priorities = [stream.priority(allow_invalid=rng.random() < 0.3) for _ in keys]
            if rng.random() < 0.03:
                priorities.append(0.0)
            op, args = "update_many", (keys, priorities)
        elif roll < 0.72:
            if model and rng.random() < 0.8:
                # Deletes hit the front, the back and the middle.
                where = rng.random()
                key = model[0] if where < 0.3 else model[-1] if where < 0.5 else rng.choice(model)
            else:
                key = stream.key()
            op, args = "delete", (key,)
        elif roll < 0.86:
            op, args = "sample", (rng.random(),)
        elif roll < 0.93:
            op, args = "probability", (stream.key(),)
        elif roll < 0.995:
            op, args = "__contains__", (stream.key(),)
        else:
            op, args = "clear", ()
        before = pure.keys()
        got_pure = _outcome(lambda: getattr(pure, op)(*args))
        got_compiled = _outcome(lambda: getattr(compiled, op)(*args))
        label = f"seed={seed} step={step} op={op}{args!r}: {got_pure!r} vs {got_compiled!r}"
        assert _same(got_pure, got_compiled), label
        stats[got_pure[0]] += 1
        if got_pure[0] == "error":
            assert pure.keys() == before, label
        elif op == "insert":
            model.append(operator.index(args[0]))
        elif op == "delete":
            model.remove(operator.index(args[0]))
        elif op == "clear":
            model.clear()
        elif op == "sample":
            stats["samples"] += 1
            assert got_pure[1] == (model[-1] if lifo else model[0], 1.0), label
        elif op == "probability":
            expected = 1.0 if operator.index(args[0]) == (model[-1] if lifo else model[0]) else 0.0
            assert got_pure[1] == expected, label
        if step % full_every == 0 or op == "clear":
            _compare(pure, compiled, label)
            assert pure.keys() == model, label
    _compare(pure, compiled, f"seed={seed} end")
    return stats


@pytest.mark.parametrize("seed", range(8))
def test_ordered_streams_small_key_range(ordered: tuple[type, type], seed: int) -> None:
    stats = _run_ordered_stream(*ordered, seed=seed, n_ops=10000, key_range=24, full_every=1)
    assert stats["ok"] > 1000 and stats["error"] > 200 and stats["samples"] > 200


@pytest.mark.parametrize("seed", range(100, 104))
def test_ordered_streams_large_key_range(ordered: tuple[type, type], seed: int) -> None:
    stats = _run_ordered_stream(*ordered, seed=seed, n_ops=20000, key_range=3000, full_every=97)
    assert stats["ok"] > 3000


@pytest.mark.parametrize("lifo", [False, True])
def test_ordered_node_reuse_keeps_order(ordered: tuple[type, type], lifo: bool) -> None:
    """Waves of inserts and deletes: freed nodes are reused without breaking the order."""
    pure_cls, compiled_cls = ordered
    rng = random.Random(11 + lifo)
    pure, compiled = pure_cls(lifo), compiled_cls(lifo)
    next_key = KEY_MAX - 100_000
    for _ in range(30):
        for _ in range(rng.randint(50, 300)):
            pure.insert(next_key, 0.0)
            compiled.insert(next_key, 0.0)
            next_key += 1
        present = pure.keys()
        for key in rng.sample(present, rng.randint(0, len(present))):
            pure.delete(key)
            compiled.delete(key)
        assert pure.keys() == compiled.keys() == sorted(pure.keys())
        if len(pure):
            assert pure.sample(0.1) == compiled.sample(0.9)
    pure.clear()
    compiled.clear()
    assert pure.keys() == compiled.keys() == []
    pure.insert(5, 1.0)
    compiled.insert(5, 1.0)
    assert pure.sample(0.0) == compiled.sample(0.0) == (5, 1.0)


def test_ordered_pickle_state_is_interchangeable(ordered: tuple[type, type]) -> None:
    pure_cls, compiled_cls = ordered
    for lifo in (False, True):
        pure, compiled = pure_cls(lifo), compiled_cls(lifo)
        for key in [9, 3, KEY_MAX, 0, 7]:
            pure.insert(key, 1.0)
            compiled.insert(key, 1.0)
        pure.delete(3)
        compiled.delete(3)
        assert pure.__reduce__()[1:] == compiled.__reduce__()[1:]
        crossed = compiled_cls(lifo)
        crossed.__setstate__(pure.__reduce__()[2])
        for clone in (pickle.loads(pickle.dumps(compiled)), copy.deepcopy(pure), crossed):
            assert clone.keys() == pure.keys()
            assert clone.sample(0.0) == pure.sample(0.0)
            assert clone.lifo is lifo


# ------------------------------------------------------------------------ API parity


def _public_names(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


@pytest.mark.parametrize("module_name", ["indexed_heap", "ordered_keys"])
def test_signatures_match(module_name: str) -> None:
    pure_module, compiled_module = _twins(module_name)
    assert pure_module.__all__ == compiled_module.__all__
    for class_name in pure_module.__all__:
        pure_cls = getattr(pure_module, class_name)
        compiled_cls = getattr(compiled_module, class_name)
        assert _public_names(pure_cls) == _public_names(compiled_cls)
        names = sorted(_public_names(pure_cls)) + ["__reduce__", "__setstate__"]
        assert len(names) >= 11
        for name in names:
            pure_attr = inspect.getattr_static(pure_cls, name)
            compiled_attr = inspect.getattr_static(compiled_cls, name)
            if isinstance(pure_attr, property):
                assert inspect.isdatadescriptor(compiled_attr), name
                assert not callable(compiled_attr), name
                continue
            assert callable(compiled_attr), name
            pure_sig = inspect.signature(getattr(pure_cls, name))
            compiled_sig = inspect.signature(getattr(compiled_cls, name))
            assert str(pure_sig) == str(compiled_sig), name
        # The constructor takes the same argument, by position or by keyword.
        (parameter,) = list(inspect.signature(pure_cls).parameters)
        for cls in (pure_cls, compiled_cls):
            assert getattr(cls(**{parameter: True}), parameter) is True
            assert getattr(cls(0), parameter) is False
        # Dunders the table relies on exist on both.
        for dunder in ("__len__", "__contains__", "__repr__"):
            assert dunder in vars(pure_cls) and dunder in vars(compiled_cls), dunder
