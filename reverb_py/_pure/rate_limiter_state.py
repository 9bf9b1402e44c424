"""Rate-limiter counters and predicates (pure-Python twin).

The compiled twin is ``reverb_py._speedups.rate_limiter_state`` (source
``_speedups/rate_limiter_state.pyx``); both have the same API and bit-identical
behaviour.

The predicates are Reverb's (``reverb/cc/rate_limiter.cc``)::

    can_insert(n):  inserts + n - deletes <= min_size_to_sample           (integers)
                    or (inserts + n) * samples_per_insert - samples <= max_diff
    can_sample(n):  inserts - deletes >= min_size_to_sample               (integers)
                    and inserts * samples_per_insert - samples - n >= min_diff

The float expressions are evaluated in C's order with every integer first converted to a
double (``float()`` here, correctly rounded like the C conversion). Counters are signed
64-bit integers in C; both twins refuse values, and updates, that leave that range. The
configuration is not validated here (the public rate limiters do it); NaN or huge
values make predicates false or true, never crash.
"""

from __future__ import annotations

import operator
from typing import Any

from reverb_py._pure._common import to_float
from reverb_py.errors import InvalidArgumentError

__all__ = ["RateLimiterState"]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _to_int64(value: object, what: str) -> int:
    """Returns ``value`` as an exact ``int`` in the signed 64-bit range.

    Raises:
      TypeError: ``value`` is not an integer.
      OverflowError: ``value`` does not fit in a signed 64-bit integer.
    """
    if type(value) is not int:
        if not isinstance(value, int):
            raise TypeError(f"{what} must be an integer, got {type(value).__name__}.")
        value = operator.index(value)
    if value < _INT64_MIN or value > _INT64_MAX:
        raise OverflowError(f"{what} must fit in a signed 64-bit integer, got {value}.")
    return value


def _to_count(value: object, what: str) -> int:
    """Returns ``value`` as an exact ``int`` in ``[1, 2**63)``.

    Raises:
      TypeError: ``value`` is not an integer.
      InvalidArgumentError: ``value`` is below 1.
      OverflowError: ``value`` does not fit in a signed 64-bit integer.
    """
    if type(value) is not int:
        if not isinstance(value, int):
            raise TypeError(f"{what} must be an integer, got {type(value).__name__}.")
        value = operator.index(value)
    if value < 1:
        raise InvalidArgumentError(f"{what} must be >= 1, got {value}.")
    if value > _INT64_MAX:
        raise OverflowError(f"{what} must fit in a signed 64-bit integer, got {value}.")
    return value


class RateLimiterState:
    """The counters of a rate limiter and Reverb's insert and sample predicates.

    Args:
      samples_per_insert: the target number of samples per insert.
      min_size_to_sample: the table size (inserts minus deletes) below which sampling
        is blocked and inserting is always allowed.
      min_diff: sampling needs ``inserts * samples_per_insert - samples - n >=
        min_diff``.
      max_diff: inserting needs ``(inserts + n) * samples_per_insert - samples <=
        max_diff``.
      inserts: initial insert count.
      samples: initial sample count.
      deletes: initial delete count.

    Raises:
      TypeError: an argument has the wrong type.
      OverflowError: an integer does not fit in a signed 64-bit integer.
    """

    __slots__ = (
        "_samples_per_insert",
        "_min_size_to_sample",
        "_min_diff",
        "_max_diff",
        "_inserts",
        "_samples",
        "_deletes",
    )

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        min_diff: float,
        max_diff: float,
        inserts: int = 0,
        samples: int = 0,
        deletes: int = 0,
    ) -> None:
        self._samples_per_insert: float = to_float(samples_per_insert, "samples_per_insert")
        self._min_size_to_sample: int = _to_int64(min_size_to_sample, "min_size_to_sample")
        self._min_diff: float = to_float(min_diff, "min_diff")
        self._max_diff: float = to_float(max_diff, "max_diff")
        checked_inserts = _to_int64(inserts, "inserts")
        checked_samples = _to_int64(samples, "samples")
        checked_deletes = _to_int64(deletes, "deletes")
        self._inserts: int = checked_inserts
        self._samples: int = checked_samples
        self._deletes: int = checked_deletes

    # ----------------------------------------------------------------- properties

    @property
    def samples_per_insert(self) -> float:
        """The target number of samples per insert."""
        return self._samples_per_insert

    @property
    def min_size_to_sample(self) -> int:
        """The size below which sampling is blocked."""
        return self._min_size_to_sample

    @property
    def min_diff(self) -> float:
        """The lower bound of ``inserts * samples_per_insert - samples`` after a sample."""
        return self._min_diff

    @property
    def max_diff(self) -> float:
        """The upper bound of ``inserts * samples_per_insert - samples`` after an insert."""
        return self._max_diff

    @property
    def inserts(self) -> int:
        """Inserts counted so far."""
        return self._inserts

    @property
    def samples(self) -> int:
        """Samples counted so far."""
        return self._samples

    @property
    def deletes(self) -> int:
        """Deletes counted so far."""
        return self._deletes

    # ---------------------------------------------------------------- predicates

    def can_insert(self, n: int) -> bool:
        """Whether ``n`` inserts may proceed now.

        Args:
          n: the number of inserts, at least 1.

        Raises:
          TypeError: ``n`` is not an integer.
          InvalidArgumentError: ``n`` is below 1.
          OverflowError: ``n`` does not fit in a signed 64-bit integer.
        """
        if type(n) is not int or n < 1 or n > _INT64_MAX:
            n = _to_count(n, "num_inserts")
        inserts = self._inserts + n
        if inserts - self._deletes <= self._min_size_to_sample:
            return True
        return float(inserts) * self._samples_per_insert - float(self._samples) <= self._max_diff

    def can_sample(self, n: int) -> bool:
        """Whether ``n`` samples may proceed now.

        Args:
          n: the number of samples, at least 1.

        Raises:
          TypeError: ``n`` is not an integer.
          InvalidArgumentError: ``n`` is below 1.
          OverflowError: ``n`` does not fit in a signed 64-bit integer.
        """
        if type(n) is not int or n < 1 or n > _INT64_MAX:
            n = _to_count(n, "num_samples")
        inserts = self._inserts
        if inserts - self._deletes < self._min_size_to_sample:
            return False
        return (
            float(inserts) * self._samples_per_insert - float(self._samples) - float(n)
            >= self._min_diff
        )

    # ------------------------------------------------------------------ updates

    def on_insert(self) -> None:
        """Counts one insert.

        Raises:
          OverflowError: the counter would leave the signed 64-bit range.
        """
        inserts = self._inserts
        if inserts == _INT64_MAX:
            raise OverflowError("inserts counter would overflow a signed 64-bit integer.")
        self._inserts = inserts + 1

    def on_sample(self) -> None:
        """Counts one sample.

        Raises:
          OverflowError: the counter would leave the signed 64-bit range.
        """
        samples = self._samples
        if samples == _INT64_MAX:
            raise OverflowError("samples counter would overflow a signed 64-bit integer.")
        self._samples = samples + 1

    def on_delete(self, n: int = 1) -> None:
        """Counts ``n`` deletes.

        Raises:
          TypeError: ``n`` is not an integer.
          OverflowError: ``n`` or the counter would leave the signed 64-bit range.
        """
        if type(n) is not int or n < _INT64_MIN or n > _INT64_MAX:
            n = _to_int64(n, "n")
        deletes = self._deletes + n
        if deletes < _INT64_MIN or deletes > _INT64_MAX:
            raise OverflowError("deletes counter would overflow a signed 64-bit integer.")
        self._deletes = deletes

    def try_sample(self) -> bool:
        """Counts one sample and returns ``True`` if :meth:`can_sample` allows one.

        Returns ``False`` and changes nothing otherwise.

        Raises:
          OverflowError: the counter would leave the signed 64-bit range.
        """
        inserts = self._inserts
        if inserts - self._deletes < self._min_size_to_sample:
            return False
        samples = self._samples
        if not (float(inserts) * self._samples_per_insert - float(samples) - 1.0 >= self._min_diff):
            return False
        if samples == _INT64_MAX:
            raise OverflowError("samples counter would overflow a signed 64-bit integer.")
        self._samples = samples + 1
        return True

    def reset(self) -> None:
        """Sets every counter to 0."""
        self._inserts = 0
        self._samples = 0
        self._deletes = 0

    def set_counters(self, inserts: int, samples: int, deletes: int) -> None:
        """Sets the counters, e.g. when restoring a checkpoint.

        Raises:
          TypeError: a value is not an integer.
          OverflowError: a value does not fit in a signed 64-bit integer.
        """
        checked_inserts = _to_int64(inserts, "inserts")
        checked_samples = _to_int64(samples, "samples")
        checked_deletes = _to_int64(deletes, "deletes")
        self._inserts = checked_inserts
        self._samples = checked_samples
        self._deletes = checked_deletes

    def __repr__(self) -> str:
        return (
            f"RateLimiterState(samples_per_insert={self._samples_per_insert!r}, "
            f"min_size_to_sample={self._min_size_to_sample}, "
            f"min_diff={self._min_diff!r}, max_diff={self._max_diff!r}, "
            f"inserts={self._inserts}, samples={self._samples}, deletes={self._deletes})"
        )

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (
                self._samples_per_insert,
                self._min_size_to_sample,
                self._min_diff,
                self._max_diff,
                self._inserts,
                self._samples,
                self._deletes,
            ),
        )
