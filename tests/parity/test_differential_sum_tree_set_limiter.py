"""Differential tests: the pure and compiled SumTree, IndexedSet and RateLimiterState.

Seeded streams of mixed operations, valid and invalid, are applied to both twins; every
result (keys, probabilities, totals, booleans, counters) and every raised exception (type
and message) must agree, and so must the public API (method signatures, properties).
"""

from __future__ import annotations

import functools
import inspect
import math
import random
import sys
from collections.abc import Callable
from typing import Any

import pytest

from reverb_py._pure.indexed_set import IndexedSet as PyIndexedSet
from reverb_py._pure.rate_limiter_state import RateLimiterState as PyRateLimiterState
from reverb_py._pure.sum_tree import SumTree as PySumTree
from reverb_py.errors import InvalidArgumentError, NotFoundError
from tests.helpers import compiled_module

KEY_MAX = 2**64 - 1
BELOW_ONE = math.nextafter(1.0, 0.0)
FMAX = sys.float_info.max
INT64_MAX = 2**63 - 1


def compiled(module_name: str, class_name: str) -> Any:
    """Returns the compiled twin, or skips (fails with REVERB_PY_REQUIRE_SPEEDUPS)."""
    return getattr(compiled_module(module_name), class_name)


@pytest.fixture
def cy_sum_tree() -> Any:
    return compiled("sum_tree", "SumTree")


@pytest.fixture
def cy_indexed_set() -> Any:
    return compiled("indexed_set", "IndexedSet")


@pytest.fixture
def cy_rate_limiter_state() -> Any:
    return compiled("rate_limiter_state", "RateLimiterState")


# ------------------------------------------------------------------ comparison


def outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    """``("ok", result)`` or ``("error", exception type, message)``."""
    try:
        return ("ok", call())
    except Exception as error:  # noqa: BLE001 - every error is part of the outcome
        return ("error", type(error), str(error))


def same(a: Any, b: Any) -> bool:
    """Equal values of the same type; floats within rel_tol=1e-12 (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def check(step: int, what: str, py: Callable[[], Any], cy: Callable[[], Any]) -> Any:
    """Runs one operation on both twins and asserts the same outcome."""
    expected = outcome(py)
    actual = outcome(cy)
    assert same(expected, actual), f"step {step}: {what}: pure {expected!r} != compiled {actual!r}"
    return expected


# ------------------------------------------------------------------- generators


class LyingInt(int):
    """An int subclass whose __int__, __index__ and __repr__ lie: twins use its value."""

    def __int__(self) -> int:
        return 7

    def __index__(self) -> int:
        return 7

    def __repr__(self) -> str:
        return "LyingInt"


class Streams:
    """Random keys, priorities and u values, valid ones mostly."""

    def __init__(self, seed: int, zero_bias: float) -> None:
        self.rng = random.Random(seed)
        self.zero_bias = zero_bias
        self.pool = list(range(48)) + [KEY_MAX - i for i in range(8)] + [2**63, 2**63 - 1]

    def key(self) -> Any:
        rng = self.rng
        roll = rng.random()
        if roll < 0.03:
            return rng.choice(
                [-1, 2**64, 2**70, -(2**64), 1.5, "7", None, True, LyingInt(-3), LyingInt(2**64)]
            )
        if roll < 0.05:
            return LyingInt(rng.choice(self.pool))
        return rng.choice(self.pool)

    def priority(self) -> Any:
        rng = self.rng
        roll = rng.random()
        if roll < self.zero_bias:
            return 0.0
        if roll < 0.96:
            return rng.choice(
                [
                    rng.random(),
                    rng.random() * 1e3,
                    rng.random() * 1e-6,
                    float(rng.randrange(1, 100)),
                    rng.randrange(0, 10),
                    1e-300,
                    5e-324,
                    True,
                ]
            )
        return rng.choice(
            [
                float("nan"),
                -1.0,
                -0.0,
                float("inf"),
                float("-inf"),
                1e300,
                FMAX,
                "1.0",
                None,
                10**400,
                1j,
                [1.0],
            ]
        )

    def u(self) -> Any:
        rng = self.rng
        if rng.random() < 0.03:
            return rng.choice([1.0, -0.25, float("nan"), 1.5, "0.5", 0, BELOW_ONE, 0.0])
        return rng.random()


def run_selector_stream(py: Any, cy: Any, streams: Streams, steps: int, weights: bool) -> None:
    rng = streams.rng
    ops = ["insert"] * 30 + ["update"] * 14 + ["update_many"] * 8 + ["delete"] * 16
    ops += ["sample"] * 20 + ["probability"] * 4 + ["contains"] * 3 + ["keys"] * 2
    ops += ["weight"] * 3 if weights else []
    for step in range(steps):
        op = "clear" if rng.random() < 0.004 else rng.choice(ops)
        if op == "insert":
            key, priority = streams.key(), streams.priority()
            check(
                step,
                f"insert({key!r}, {priority!r})",
                lambda: py.insert(key, priority),
                lambda: cy.insert(key, priority),
            )
        elif op == "update":
            key, priority = streams.key(), streams.priority()
            check(
                step,
                f"update({key!r}, {priority!r})",
                lambda: py.update(key, priority),
                lambda: cy.update(key, priority),
            )
        elif op == "update_many":
            live = py.keys()
            count = rng.randrange(0, 7)
            keys = [
                rng.choice(live) if live and rng.random() < 0.9 else streams.key()
                for _ in range(count)
            ]
            priorities = [streams.priority() for _ in range(count)]
            if rng.random() < 0.05:
                priorities.append(1.0)
            as_tuple = rng.random() < 0.3
            keys_arg = tuple(keys) if as_tuple else keys
            check(
                step,
                f"update_many({keys!r}, {priorities!r})",
                lambda: py.update_many(keys_arg, priorities),
                lambda: cy.update_many(keys_arg, priorities),
            )
        elif op == "delete":
            live = py.keys()
            key = rng.choice(live) if live and rng.random() < 0.8 else streams.key()
            check(step, f"delete({key!r})", lambda: py.delete(key), lambda: cy.delete(key))
        elif op == "sample":
            for _ in range(rng.randrange(1, 6)):
                u = streams.u()
                check(step, f"sample({u!r})", lambda: py.sample(u), lambda: cy.sample(u))
        elif op == "probability":
            live = py.keys()
            key = rng.choice(live) if live and rng.random() < 0.8 else streams.key()
            check(
                step,
                f"probability({key!r})",
                lambda: py.probability(key),
                lambda: cy.probability(key),
            )
        elif op == "weight":
            live = py.keys()
            key = rng.choice(live) if live and rng.random() < 0.8 else streams.key()
            check(step, f"weight({key!r})", lambda: py.weight(key), lambda: cy.weight(key))
        elif op == "contains":
            key = streams.key()
            check(step, f"contains({key!r})", lambda: key in py, lambda: key in cy)
        elif op == "keys":
            check(step, "keys()", py.keys, cy.keys)
        elif op == "clear":
            check(step, "clear()", py.clear, cy.clear)
        check(step, f"len after {op}", lambda: len(py), lambda: len(cy))
        if weights:
            # Bit-identical sums, not just close: the same float operations in order.
            assert py.total == cy.total or (math.isnan(py.total) and math.isnan(cy.total)), (
                f"step {step}: total {py.total!r} != {cy.total!r}"
            )
        if step % 25 == 0:
            check(step, "keys()", py.keys, cy.keys)
            check(step, "repr()", lambda: repr(py), lambda: repr(cy))
    check(steps, "keys()", py.keys, cy.keys)
    check(steps, "repr()", lambda: repr(py), lambda: repr(cy))
    if len(py):
        for i in range(200):
            u = i / 200
            check(steps, f"final sample({u!r})", lambda: py.sample(u), lambda: cy.sample(u))


# --------------------------------------------------------------------- SumTree


@pytest.mark.parametrize(
    ("seed", "exponent", "zero_bias", "capacity"),
    [
        (1, 1.0, 0.05, 1),
        (2, 0.6, 0.05, 1024),
        (3, 0.0, 0.2, 4),
        (4, 2.0, 0.05, 2),
        (5, 0.5, 0.8, 8),  # mostly zero priorities: the uniform fallback
        (6, -0.5, 0.05, 16),
        (7, 1.7, 0.4, 1),
        (8, 0.9, 0.0, 64),
    ],
)
def test_sum_tree_streams(
    cy_sum_tree: Any, seed: int, exponent: float, zero_bias: float, capacity: int
) -> None:
    py = PySumTree(exponent, capacity)
    cy = cy_sum_tree(exponent, capacity)
    run_selector_stream(py, cy, Streams(seed, zero_bias), steps=3000, weights=True)


def test_sum_tree_large_random_tree(cy_sum_tree: Any) -> None:
    rng = random.Random(99)
    py = PySumTree(0.8, 1)
    cy = cy_sum_tree(0.8, 1)
    keys = [rng.getrandbits(64) for _ in range(5000)]
    for key in keys:
        priority = rng.choice([0.0, rng.random(), rng.random() * 1e5, rng.random() * 1e-5])
        py.insert(key, priority)
        cy.insert(key, priority)
    for key in rng.sample(keys, 2000):
        py.delete(key)
        cy.delete(key)
    live = py.keys()
    batch = rng.sample(live, 500)
    priorities = [rng.random() for _ in batch]
    py.update_many(batch, priorities)
    cy.update_many(batch, priorities)
    assert py.keys() == cy.keys()
    assert py.total == cy.total
    for step in range(5000):
        u = rng.random()
        check(step, f"sample({u!r})", lambda: py.sample(u), lambda: cy.sample(u))
    for key in live[:500]:
        assert py.weight(key) == cy.weight(key)
        assert py.probability(key) == cy.probability(key)


def test_sum_tree_constructor_errors(cy_sum_tree: Any) -> None:
    for args in [(1.0, 0), (1.0, -3), ("1", 4), (1.0, 2.0), (None,), (1.0, None)]:
        check(
            0, f"SumTree{args!r}", lambda: repr(PySumTree(*args)), lambda: repr(cy_sum_tree(*args))
        )


# ------------------------------------------------------------------ IndexedSet


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_indexed_set_streams(cy_indexed_set: Any, seed: int) -> None:
    run_selector_stream(
        PyIndexedSet(), cy_indexed_set(), Streams(seed, 0.1), steps=3000, weights=False
    )


# ------------------------------------------------------------ RateLimiterState


def limiter_config(rng: random.Random) -> tuple[Any, ...]:
    spi = rng.choice([1.0, 0.5, 2.0, 0.1, 3.7, rng.random() * 4, FMAX, float("nan"), 1])
    min_size = rng.choice([0, 1, 2, 5, 10, -3])
    diffs = [-FMAX, FMAX, 0.0, 1.0, -1.0, 2.5, -7.5, float(rng.randrange(-20, 20))]
    min_diff = rng.choice(diffs)
    max_diff = rng.choice(diffs)
    return spi, min_size, min_diff, max_diff


def count(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return rng.choice(
            [0, -1, 2**63, 2**64, -(2**63) - 1, 1.0, "2", None, True, LyingInt(0), LyingInt(3)]
        )
    return rng.choice([1, 1, 1, 2, 3, 5, 17])


def counters(limiter: Any) -> tuple[int, int, int]:
    return limiter.inserts, limiter.samples, limiter.deletes


@pytest.mark.parametrize("seed", [21, 22, 23, 24, 25, 26])
def test_rate_limiter_state_streams(cy_rate_limiter_state: Any, seed: int) -> None:
    rng = random.Random(seed)
    for config_round in range(20):
        config = limiter_config(rng)
        py = PyRateLimiterState(*config)
        cy = cy_rate_limiter_state(*config)
        for step in range(400):
            op = rng.choice(
                ["can_insert"] * 6
                + ["can_sample"] * 6
                + ["on_insert"] * 6
                + ["on_sample"] * 2
                + ["try_sample"] * 6
                + ["on_delete"] * 2
                + ["set_counters", "reset"]
            )
            where = f"round {config_round} {config!r} step {step}"
            if op in ("can_insert", "can_sample"):
                n = count(rng)
                check(
                    step,
                    f"{where}: {op}({n!r})",
                    lambda: getattr(py, op)(n),
                    lambda: getattr(cy, op)(n),
                )
            elif op == "on_delete":
                n = rng.choice([1, 2, 0, 2**63, -1, 1.0]) if rng.random() < 0.3 else 1
                check(
                    step,
                    f"{where}: on_delete({n!r})",
                    lambda: py.on_delete(n),
                    lambda: cy.on_delete(n),
                )
            elif op == "set_counters":
                values = [
                    rng.choice([0, 3, 2**53 + 1, 2**53 + 3, INT64_MAX, 2**63, -5, 1.0])
                    if rng.random() < 0.2
                    else rng.randrange(0, 50)
                    for _ in range(3)
                ]
                check(
                    step,
                    f"{where}: set_counters{values!r}",
                    lambda: py.set_counters(*values),
                    lambda: cy.set_counters(*values),
                )
            elif op == "reset" and rng.random() < 0.3:
                check(step, f"{where}: reset()", py.reset, cy.reset)
            elif op != "reset":
                check(step, f"{where}: {op}()", getattr(py, op), getattr(cy, op))
            check(step, f"{where}: counters after {op}", lambda: counters(py), lambda: counters(cy))
        check(0, "repr", lambda: repr(py), lambda: repr(cy))


def test_rate_limiter_state_constructor_errors(cy_rate_limiter_state: Any) -> None:
    cases = [
        ("1", 0, 0.0, 1.0),
        (1.0, 1.5, 0.0, 1.0),
        (1.0, 2**63, 0.0, 1.0),
        (1.0, 0, None, 1.0),
        (1.0, 0, 0.0, 1.0, -(2**63) - 1),
        (1.0, 0, 0.0, 1.0, 0, 0, 2**64),
        (1, True, -1, 1, 2, 3, 4),
    ]
    for args in cases:
        check(
            0,
            f"RateLimiterState{args!r}",
            lambda: repr(PyRateLimiterState(*args)),
            lambda: repr(cy_rate_limiter_state(*args)),
        )


# ---------------------------------------------------------------- API parity


PAIRS = [
    ("sum_tree", "SumTree", PySumTree, (1.0,)),
    ("indexed_set", "IndexedSet", PyIndexedSet, ()),
    ("rate_limiter_state", "RateLimiterState", PyRateLimiterState, (1.0, 1, -1.0, 1.0)),
]


def public_names(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


@pytest.mark.parametrize(("module_name", "class_name", "py_cls", "args"), PAIRS)
def test_api_parity(module_name: str, class_name: str, py_cls: type, args: tuple[Any, ...]) -> None:
    cy_cls = compiled(module_name, class_name)
    assert public_names(py_cls) == public_names(cy_cls)
    py_obj = py_cls(*args)
    cy_obj = cy_cls(*args)
    for name in sorted(public_names(py_cls)):
        py_attr = inspect.getattr_static(py_cls, name)
        cy_attr = inspect.getattr_static(cy_cls, name)
        if isinstance(py_attr, property):
            assert py_attr.fset is None, name
            assert inspect.isdatadescriptor(cy_attr), name
            assert not callable(cy_attr), name
            for obj in (py_obj, cy_obj):
                with pytest.raises(AttributeError):
                    setattr(obj, name, getattr(obj, name))
            assert same(getattr(py_obj, name), getattr(cy_obj, name)), name
            assert inspect.getdoc(py_attr) == inspect.getdoc(cy_attr), name
        else:
            assert callable(py_attr) and callable(cy_attr), name
            py_signature = inspect.signature(getattr(py_cls, name))
            cy_signature = inspect.signature(getattr(cy_cls, name))
            assert py_signature == cy_signature, f"{class_name}.{name}"
            assert inspect.getdoc(getattr(py_cls, name)) == inspect.getdoc(getattr(cy_cls, name)), (
                f"{class_name}.{name} docstring"
            )
    for dunder in ("__len__", "__contains__", "__repr__", "__reduce__"):
        if dunder in ("__len__", "__contains__") and class_name == "RateLimiterState":
            continue
        assert dunder in vars(py_cls), f"{class_name}.{dunder} (pure)"
        assert dunder in vars(cy_cls), f"{class_name}.{dunder} (compiled)"


@pytest.mark.parametrize(("module_name", "class_name", "py_cls", "args"), PAIRS)
def test_constructor_signature_parity(
    module_name: str, class_name: str, py_cls: type, args: tuple[Any, ...]
) -> None:
    cy_cls = compiled(module_name, class_name)

    def shape(cls: type) -> list[tuple[str, Any, Any]]:
        return [
            (parameter.name, parameter.kind, parameter.default)
            for parameter in inspect.signature(cls).parameters.values()
        ]

    # The compiled constructor's signature comes from its text signature, which has
    # no annotations: compare names, kinds and defaults.
    assert shape(py_cls) == shape(cy_cls)
    assert inspect.getdoc(py_cls) is not None and inspect.getdoc(cy_cls) is not None


def test_sum_tree_update_many_on_a_tree_that_prefetches(cy_sum_tree: Any) -> None:
    # Above 2**15 slots the compiled update_many asks for memory ahead of each entry:
    # results and errors must still be the pure twin's, entry for entry.
    rng = random.Random(2026)
    py = PySumTree(0.8, 1)
    cy = cy_sum_tree(0.8, 1)
    keys = list({rng.getrandbits(64) for _ in range(40_000)})
    for key in keys:
        priority = rng.random() * 10
        py.insert(key, priority)
        cy.insert(key, priority)
    for size in (1, 7, 8, 9, 1000, 5000):
        batch = rng.sample(keys, size) + rng.sample(keys, size // 3)  # some twice
        priorities = [rng.choice([0.0, rng.random(), rng.random() * 1e4]) for _ in batch]
        py.update_many(batch, priorities)
        cy.update_many(batch, priorities)
        assert py.total == cy.total
    assert [py.weight(key) for key in keys] == [cy.weight(key) for key in keys]
    absent = 2**64 - 1
    assert absent not in py
    good = rng.sample(keys, 50)
    cases: list[tuple[list[Any], list[Any], type[Exception]]] = [
        (good[:30] + [absent] + good[30:], [1.0] * 51, NotFoundError),
        # A missing key before a priority the tree refuses is reported first, and the
        # refused priority before a later missing key.
        (good[:10] + [absent] + good[10:], [1.0] * 40 + [-1.0] + [1.0] * 10, NotFoundError),
        (good[:40] + [absent] + good[40:], [1.0] * 10 + [-1.0] + [1.0] * 40, InvalidArgumentError),
        (
            good[:40] + [absent] + good[40:],
            [1.0] * 10 + [math.nan] + [1.0] * 40,
            InvalidArgumentError,
        ),
        (good + [2**64], [1.0] * 51, InvalidArgumentError),
        (good + ["x"], [1.0] * 51, TypeError),
        (good, [1.0] * 49 + ["x"], TypeError),
    ]
    for bad_keys, bad_priorities, error in cases:
        expected = check(
            0,
            "update_many",
            functools.partial(py.update_many, bad_keys, bad_priorities),
            functools.partial(cy.update_many, bad_keys, bad_priorities),
        )
        assert expected[:2] == ("error", error), expected
    assert py.total == cy.total
    assert [py.weight(key) for key in keys] == [cy.weight(key) for key in keys]
