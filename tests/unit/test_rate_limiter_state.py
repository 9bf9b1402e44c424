"""Behaviour of RateLimiterState (Reverb's rate-limiter predicates), over both twins."""

from __future__ import annotations

import math
import pickle
import sys
import types
from typing import Any

import pytest

from reverb_py.errors import InvalidArgumentError

MAX = sys.float_info.max
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def state(impl: types.SimpleNamespace, *args: Any, **kwargs: Any) -> Any:
    return impl.RateLimiterState(*args, **kwargs)


def counters(limiter: Any) -> tuple[int, int, int]:
    return limiter.inserts, limiter.samples, limiter.deletes


# ---------------------------------------------------------------------- basics


def test_properties_and_defaults(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 2.0, 3, -1.5, 4.5)
    assert limiter.samples_per_insert == 2.0
    assert limiter.min_size_to_sample == 3
    assert limiter.min_diff == -1.5
    assert limiter.max_diff == 4.5
    assert counters(limiter) == (0, 0, 0)
    limiter = state(impl, 1, 0, -MAX, MAX, inserts=5, samples=6, deletes=2)
    assert type(limiter.samples_per_insert) is float
    assert counters(limiter) == (5, 6, 2)
    assert limiter.min_diff == -MAX and limiter.max_diff == MAX


@pytest.mark.parametrize(
    "name",
    [
        "samples_per_insert",
        "min_size_to_sample",
        "min_diff",
        "max_diff",
        "inserts",
        "samples",
        "deletes",
    ],
)
def test_properties_are_read_only(impl: types.SimpleNamespace, name: str) -> None:
    limiter = state(impl, 1.0, 1, 0.0, 1.0)
    with pytest.raises(AttributeError):
        setattr(limiter, name, 3)


def test_repr(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.5, 2, -MAX, 10.0, inserts=3, samples=4, deletes=1)
    assert repr(limiter) == (
        "RateLimiterState(samples_per_insert=1.5, min_size_to_sample=2, "
        "min_diff=-1.7976931348623157e+308, max_diff=10.0, inserts=3, samples=4, deletes=1)"
    )


def test_counter_updates(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.0, 0, -MAX, MAX)
    limiter.on_insert()
    limiter.on_insert()
    limiter.on_sample()
    limiter.on_delete()
    limiter.on_delete(3)
    assert counters(limiter) == (2, 1, 4)
    limiter.set_counters(10, 20, 30)
    assert counters(limiter) == (10, 20, 30)
    limiter.reset()
    assert counters(limiter) == (0, 0, 0)
    assert limiter.samples_per_insert == 1.0


# ----------------------------------------------------------------- predicates


def test_min_size_limiter(impl: types.SimpleNamespace) -> None:
    # MinSize(3): spi 1, min_diff -max, max_diff +max.
    limiter = state(impl, 1.0, 3, -MAX, MAX)
    assert limiter.can_insert(1)
    assert not limiter.can_sample(1)
    for _ in range(2):
        limiter.on_insert()
    assert not limiter.can_sample(1)  # 2 - 0 < 3
    limiter.on_insert()
    assert limiter.can_sample(1)  # 3 >= 3; 3 - 0 - 1 >= -max
    assert limiter.can_sample(10**9)
    assert limiter.can_insert(10**9)
    limiter.on_delete(2)
    assert not limiter.can_sample(1)  # 3 - 2 < 3


def test_sample_to_insert_ratio_limiter(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 2.0, 2, -3.0, 3.0)
    # Below the minimum size inserts are always allowed.
    assert limiter.can_insert(1)  # 0 + 1 - 0 <= 2
    assert limiter.can_insert(2)  # 2 <= 2
    assert not limiter.can_insert(3)  # 3 > 2 and 3 * 2.0 - 0 = 6 > 3
    limiter.set_counters(2, 0, 0)
    assert not limiter.can_insert(1)  # 3 * 2.0 - 0 = 6 > 3
    assert limiter.can_sample(1)  # 2 * 2.0 - 0 - 1 = 3 >= -3
    assert limiter.can_sample(7)  # 4 - 7 = -3 >= -3
    assert not limiter.can_sample(8)  # -4 < -3
    limiter.set_counters(2, 3, 0)
    assert limiter.can_insert(1)  # 6 - 3 = 3 <= 3
    assert not limiter.can_insert(2)  # 8 - 3 = 5 > 3
    assert limiter.can_sample(4)  # 4 - 3 - 4 = -3
    assert not limiter.can_sample(5)
    limiter.set_counters(2, 3, 1)
    assert not limiter.can_sample(1)  # 2 - 1 < 2
    assert limiter.can_insert(1)  # 2 + 1 - 1 <= 2
    limiter.set_counters(2, 0, 2)
    assert limiter.can_insert(2)  # 2 + 2 - 2 <= 2


def test_queue_limiter(impl: types.SimpleNamespace) -> None:
    # Queue(2): spi 1, min_size 0, min_diff 0, max_diff 2.
    limiter = state(impl, 1.0, 0, 0.0, 2.0)
    assert not limiter.can_sample(1)  # 0 - 0 - 1 < 0
    assert limiter.can_insert(1)  # 1 - 0 <= 2
    assert limiter.can_insert(2)
    assert not limiter.can_insert(3)
    limiter.on_insert()
    assert limiter.can_sample(1)  # 1 - 0 - 1 = 0 >= 0
    assert not limiter.can_sample(2)
    limiter.on_insert()
    assert not limiter.can_insert(1)  # 3 - 0 > 2
    limiter.on_sample()
    assert limiter.can_insert(1)  # 3 - 1 <= 2


def test_can_sample_float_order_is_left_to_right(impl: types.SimpleNamespace) -> None:
    inserts = 2**53 + 2
    # ((2**53 + 2) - 1.0) rounds to 2**53, then - 1.0 gives 2**53 - 1; the other
    # grouping (2**53 + 2) - (1 + 1) would give 2**53.
    assert (float(inserts) - 1.0) - 1.0 == 2.0**53 - 1
    assert float(inserts) - 2.0 == 2.0**53
    limiter = state(impl, 1.0, 0, 2.0**53, MAX, inserts=inserts, samples=1)
    assert not limiter.can_sample(1)
    assert not limiter.try_sample()
    limiter = state(impl, 1.0, 0, 2.0**53 - 1, MAX, inserts=inserts, samples=1)
    assert limiter.can_sample(1)
    assert limiter.try_sample()
    assert limiter.samples == 2


def test_counters_are_converted_to_double_first(impl: types.SimpleNamespace) -> None:
    # float(2**53 + 1) == 2**53: exact integer arithmetic would allow this sample.
    limiter = state(impl, 1.0, 0, 2.0**53, MAX, inserts=2**53 + 1)
    assert not limiter.can_sample(1)
    limiter = state(impl, 1.0, 0, 2.0**53 - 1, MAX, inserts=2**53 + 1)
    assert limiter.can_sample(1)


def test_can_insert_formula(impl: types.SimpleNamespace) -> None:
    spi = 0.1
    assert float(3) * spi == 0.30000000000000004
    # (2 + 1) * 0.1 - 0 = 0.30000000000000004 > 0.3
    limiter = state(impl, spi, 1, -MAX, 0.3, inserts=2)
    assert not limiter.can_insert(1)
    limiter = state(impl, spi, 1, -MAX, 0.30000000000000004, inserts=2)
    assert limiter.can_insert(1)
    # Integer part uses the exact sum: 2**62 + 2**62 does not overflow.
    limiter = state(impl, 1.0, INT64_MAX, -MAX, -MAX, inserts=2**62, deletes=2**62)
    assert limiter.can_insert(2**62)
    assert limiter.can_insert(INT64_MAX)


def test_extreme_diffs_and_samples_per_insert(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, MAX, 0, -MAX, MAX, inserts=2)
    # 3 * max = inf > max: no insert; 2 * max - 0 - 1 = inf >= -max: sample.
    assert not limiter.can_insert(1)
    assert limiter.can_sample(1)
    limiter = state(impl, 1.0, 0, MAX, MAX, inserts=5)
    assert not limiter.can_sample(1)
    limiter = state(impl, 1.0, 0, -MAX, -MAX, inserts=5)
    assert not limiter.can_insert(1)
    assert limiter.can_sample(10**15)
    limiter = state(impl, 1.0, 10, -MAX, -MAX, inserts=5)
    assert limiter.can_insert(5)  # 10 <= 10: within min size
    assert not limiter.can_insert(6)
    limiter = state(impl, 1.0, 0, -math.inf, math.inf, inserts=5)
    assert limiter.can_insert(INT64_MAX - 5)
    assert limiter.can_sample(INT64_MAX)


def test_nan_config_never_crashes(impl: types.SimpleNamespace) -> None:
    nan = float("nan")
    limiter = state(impl, nan, 2, -MAX, MAX)
    assert limiter.can_insert(2)  # within min size: no float involved
    assert not limiter.can_insert(3)
    limiter.set_counters(5, 0, 0)
    assert not limiter.can_sample(1)
    assert not limiter.try_sample()
    limiter = state(impl, 1.0, 0, nan, nan, inserts=5)
    assert not limiter.can_sample(1)
    assert not limiter.can_insert(1)
    assert "nan" in repr(limiter)


def test_negative_min_size(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.0, -5, -MAX, 0.5)
    assert limiter.can_sample(1)  # 0 - 0 >= -5
    assert not limiter.can_insert(1)  # 1 > -5 and 1.0 > 0.5


def test_try_sample(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.0, 1, 0.0, MAX)
    assert not limiter.try_sample()
    assert counters(limiter) == (0, 0, 0)
    limiter.on_insert()
    limiter.on_insert()
    assert limiter.try_sample()  # 2 - 0 - 1 >= 0
    assert limiter.try_sample()  # 2 - 1 - 1 >= 0
    assert not limiter.try_sample()  # 2 - 2 - 1 < 0
    assert counters(limiter) == (2, 2, 0)


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize("n", [0, -1, -(2**70)])
def test_bad_counts(impl: types.SimpleNamespace, n: int) -> None:
    limiter = state(impl, 1.0, 0, -MAX, MAX)
    with pytest.raises(InvalidArgumentError) as info:
        limiter.can_insert(n)
    assert str(info.value) == f"num_inserts must be >= 1, got {n}."
    with pytest.raises(InvalidArgumentError) as info:
        limiter.can_sample(n)
    assert str(info.value) == f"num_samples must be >= 1, got {n}."


def test_counts_too_large(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.0, 0, -MAX, MAX)
    with pytest.raises(OverflowError) as info:
        limiter.can_insert(2**63)
    assert str(info.value) == (
        "num_inserts must fit in a signed 64-bit integer, got 9223372036854775808."
    )
    with pytest.raises(OverflowError):
        limiter.can_sample(2**64)


@pytest.mark.parametrize("n", [1.0, "1", None])
def test_counts_must_be_integers(impl: types.SimpleNamespace, n: object) -> None:
    limiter = state(impl, 1.0, 0, -MAX, MAX)
    with pytest.raises(TypeError):
        limiter.can_insert(n)
    with pytest.raises(TypeError):
        limiter.can_sample(n)
    with pytest.raises(TypeError):
        limiter.on_delete(n)
    assert limiter.can_insert(True)  # an int subclass


def test_counter_overflow_leaves_state_unchanged(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.0, 0, -MAX, MAX)
    limiter.set_counters(INT64_MAX, INT64_MAX, INT64_MAX)
    with pytest.raises(OverflowError):
        limiter.on_insert()
    with pytest.raises(OverflowError):
        limiter.on_sample()
    with pytest.raises(OverflowError):
        limiter.on_delete()
    with pytest.raises(OverflowError):
        limiter.try_sample()
    assert counters(limiter) == (INT64_MAX, INT64_MAX, INT64_MAX)
    limiter.set_counters(0, 0, INT64_MIN)
    with pytest.raises(OverflowError):
        limiter.on_delete(-1)
    with pytest.raises(OverflowError):
        limiter.on_delete(2**63)
    assert counters(limiter) == (0, 0, INT64_MIN)


def test_set_counters_validates_all_first(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.0, 0, -MAX, MAX, inserts=1, samples=2, deletes=3)
    with pytest.raises(OverflowError) as info:
        limiter.set_counters(5, 5, 2**63)
    assert str(info.value) == (
        "deletes must fit in a signed 64-bit integer, got 9223372036854775808."
    )
    with pytest.raises(TypeError):
        limiter.set_counters(5, 5.0, 5)
    assert counters(limiter) == (1, 2, 3)


def test_constructor_types(impl: types.SimpleNamespace) -> None:
    with pytest.raises(TypeError):
        state(impl, "1.0", 0, 0.0, 1.0)
    with pytest.raises(TypeError):
        state(impl, 1.0, 1.5, 0.0, 1.0)
    with pytest.raises(OverflowError) as info:
        state(impl, 1.0, 2**63, 0.0, 1.0)
    assert str(info.value) == (
        "min_size_to_sample must fit in a signed 64-bit integer, got 9223372036854775808."
    )
    with pytest.raises(OverflowError):
        state(impl, 1.0, 0, 0.0, 1.0, inserts=-(2**63) - 1)


def test_pickle_round_trip(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 0.25, 7, -MAX, 3.5, inserts=9, samples=4, deletes=1)
    copy = pickle.loads(pickle.dumps(limiter))
    assert type(copy) is type(limiter)
    assert repr(copy) == repr(limiter)
    copy.on_insert()
    assert limiter.inserts == 9


def test_huge_counters_are_compared_exactly(impl: types.SimpleNamespace) -> None:
    # inserts - deletes = 2**64 - 2 would overflow an int64.
    limiter = state(impl, 1.0, 5, -MAX, MAX, inserts=INT64_MAX, deletes=-INT64_MAX)
    assert limiter.can_sample(1)
    assert limiter.try_sample()
    assert limiter.can_insert(1)
    # inserts + n = 2**63 does not fit an int64; as a double it is exactly 2.0**63.
    limiter = state(impl, 1.0, 0, -MAX, 2.0**63, inserts=INT64_MAX)
    assert limiter.can_insert(1)
    limiter = state(impl, 1.0, 0, -MAX, math.nextafter(2.0**63, 0.0), inserts=INT64_MAX)
    assert not limiter.can_insert(1)
    limiter = state(impl, 1.0, INT64_MAX, -MAX, -MAX, inserts=INT64_MAX, deletes=INT64_MAX)
    assert limiter.can_insert(INT64_MAX)  # INT64_MAX + INT64_MAX - INT64_MAX <= INT64_MAX
    limiter = state(impl, 1.0, 0, -MAX, MAX, deletes=2**62)
    limiter.on_delete(2**62 - 1)
    assert limiter.deletes == INT64_MAX
    limiter.set_counters(0, 0, 2**62)
    with pytest.raises(OverflowError):
        limiter.on_delete(2**62)
    assert limiter.deletes == 2**62
    limiter.on_delete(-(2**62))
    assert limiter.deletes == 0


class LyingInt(int):
    """An int subclass whose __int__, __index__ and __repr__ lie."""

    def __int__(self) -> int:
        return 7

    def __index__(self) -> int:
        return 7

    def __repr__(self) -> str:
        return "LyingInt"


def test_int_subclass_counts_use_the_int_value(impl: types.SimpleNamespace) -> None:
    limiter = state(impl, 1.0, LyingInt(2), -MAX, MAX, inserts=LyingInt(1))
    assert limiter.min_size_to_sample == 2
    assert type(limiter.min_size_to_sample) is int
    assert limiter.inserts == 1
    assert limiter.can_insert(LyingInt(1))  # 1 + 1 <= 2
    with pytest.raises(InvalidArgumentError) as info:
        limiter.can_sample(LyingInt(0))
    assert str(info.value) == "num_samples must be >= 1, got 0."
    limiter.on_delete(LyingInt(3))
    assert limiter.deletes == 3
    limiter.set_counters(LyingInt(4), LyingInt(5), LyingInt(6))
    assert counters(limiter) == (4, 5, 6)
