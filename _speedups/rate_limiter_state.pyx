# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""Rate-limiter counters and predicates (compiled twin).

The pure-Python twin is ``reverb_py._pure.rate_limiter_state``, the reference for
behaviour and types; this module has the same API and bit-identical behaviour. Integer
arithmetic is done in int64 while every operand is within ``±2**61`` (so no sum can
overflow) and with Python ints otherwise; each integer is converted to a double
(correctly rounded) before the float expression, exactly as in the pure twin.
"""

cimport cython
from cpython.long cimport PyLong_AsDouble
from cpython.number cimport PyNumber_Index
from libc.stdint cimport int64_t, INT64_MAX, INT64_MIN

from _common cimport to_float

from reverb_py.errors import InvalidArgumentError

__all__ = ["RateLimiterState"]

cdef object _INT64_MIN = -(2**63)
cdef object _INT64_MAX = 2**63 - 1

# Sums and differences of up to three int64 values within this bound cannot overflow.
cdef int64_t _SMALL = (<int64_t>1) << 61


cdef inline bint _small(int64_t value) noexcept:
    return -_SMALL <= value <= _SMALL


cdef int64_t _to_int64(object value, str what) except? -1:
    """Returns ``value`` as an int64, raising like the pure twin."""
    if type(value) is not int:
        if not isinstance(value, int):
            raise TypeError(f"{what} must be an integer, got {type(value).__name__}.")
        value = PyNumber_Index(value)
    if value < _INT64_MIN or value > _INT64_MAX:
        raise OverflowError(f"{what} must fit in a signed 64-bit integer, got {value}.")
    return <int64_t>value


cdef int64_t _to_count(object value, str what) except? -1:
    """Returns ``value`` as an int64 in ``[1, 2**63)``, raising like the pure twin."""
    if type(value) is not int:
        if not isinstance(value, int):
            raise TypeError(f"{what} must be an integer, got {type(value).__name__}.")
        value = PyNumber_Index(value)
    if value < 1:
        raise InvalidArgumentError(f"{what} must be >= 1, got {value}.")
    if value > _INT64_MAX:
        raise OverflowError(f"{what} must fit in a signed 64-bit integer, got {value}.")
    return <int64_t>value


cdef inline int64_t _as_count(object value, str what) except? -1:
    """Fast path of :func:`_to_count` for a small exact ``int``."""
    cdef int64_t result
    if type(value) is int:
        try:
            result = <int64_t>value
        except OverflowError:
            return _to_count(value, what)
        if result >= 1:
            return result
    return _to_count(value, what)


@cython.embedsignature(False)
cdef class RateLimiterState:
    """RateLimiterState(samples_per_insert, min_size_to_sample, min_diff, max_diff,
                 inserts=0, samples=0, deletes=0)
--

The counters of a rate limiter and Reverb's insert and sample predicates.

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

    cdef double _samples_per_insert
    cdef int64_t _min_size_to_sample
    cdef double _min_diff
    cdef double _max_diff
    cdef int64_t _inserts
    cdef int64_t _samples
    cdef int64_t _deletes

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
        cdef double c_samples_per_insert = to_float(samples_per_insert, "samples_per_insert")
        cdef int64_t c_min_size_to_sample = _to_int64(min_size_to_sample, "min_size_to_sample")
        cdef double c_min_diff = to_float(min_diff, "min_diff")
        cdef double c_max_diff = to_float(max_diff, "max_diff")
        cdef int64_t c_inserts = _to_int64(inserts, "inserts")
        cdef int64_t c_samples = _to_int64(samples, "samples")
        cdef int64_t c_deletes = _to_int64(deletes, "deletes")
        self._samples_per_insert = c_samples_per_insert
        self._min_size_to_sample = c_min_size_to_sample
        self._min_diff = c_min_diff
        self._max_diff = c_max_diff
        self._inserts = c_inserts
        self._samples = c_samples
        self._deletes = c_deletes

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
        cdef int64_t c_n = _as_count(n, "num_inserts")
        cdef int64_t inserts
        cdef double float_inserts
        if _small(self._inserts) and _small(self._deletes) and _small(c_n):
            inserts = self._inserts + c_n
            if inserts - self._deletes <= self._min_size_to_sample:
                return True
            float_inserts = <double>inserts
        else:
            big_inserts = <object>self._inserts + c_n
            if big_inserts - self._deletes <= self._min_size_to_sample:
                return True
            float_inserts = PyLong_AsDouble(big_inserts)
        return (
            float_inserts * self._samples_per_insert - <double>self._samples <= self._max_diff
        )

    def can_sample(self, n: int) -> bool:
        """Whether ``n`` samples may proceed now.

        Args:
          n: the number of samples, at least 1.

        Raises:
          TypeError: ``n`` is not an integer.
          InvalidArgumentError: ``n`` is below 1.
          OverflowError: ``n`` does not fit in a signed 64-bit integer.
        """
        cdef int64_t c_n = _as_count(n, "num_samples")
        if self._below_min_size():
            return False
        return (
            <double>self._inserts * self._samples_per_insert - <double>self._samples
            - <double>c_n >= self._min_diff
        )

    # ------------------------------------------------------------------ updates

    def on_insert(self) -> None:
        """Counts one insert.

        Raises:
          OverflowError: the counter would leave the signed 64-bit range.
        """
        if self._inserts == INT64_MAX:
            raise OverflowError("inserts counter would overflow a signed 64-bit integer.")
        self._inserts += 1

    def on_sample(self) -> None:
        """Counts one sample.

        Raises:
          OverflowError: the counter would leave the signed 64-bit range.
        """
        if self._samples == INT64_MAX:
            raise OverflowError("samples counter would overflow a signed 64-bit integer.")
        self._samples += 1

    def on_delete(self, n: int = 1) -> None:
        """Counts ``n`` deletes.

        Raises:
          TypeError: ``n`` is not an integer.
          OverflowError: ``n`` or the counter would leave the signed 64-bit range.
        """
        cdef int64_t c_n = _to_int64(n, "n")
        if _small(self._deletes) and _small(c_n):
            self._deletes += c_n
            return
        deletes = <object>self._deletes + c_n
        if deletes < _INT64_MIN or deletes > _INT64_MAX:
            raise OverflowError("deletes counter would overflow a signed 64-bit integer.")
        self._deletes = <int64_t>deletes

    def try_sample(self) -> bool:
        """Counts one sample and returns ``True`` if :meth:`can_sample` allows one.

        Returns ``False`` and changes nothing otherwise.

        Raises:
          OverflowError: the counter would leave the signed 64-bit range.
        """
        if self._below_min_size():
            return False
        if not (
            <double>self._inserts * self._samples_per_insert - <double>self._samples - 1.0
            >= self._min_diff
        ):
            return False
        if self._samples == INT64_MAX:
            raise OverflowError("samples counter would overflow a signed 64-bit integer.")
        self._samples += 1
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
        cdef int64_t c_inserts = _to_int64(inserts, "inserts")
        cdef int64_t c_samples = _to_int64(samples, "samples")
        cdef int64_t c_deletes = _to_int64(deletes, "deletes")
        self._inserts = c_inserts
        self._samples = c_samples
        self._deletes = c_deletes

    def __repr__(self) -> str:
        return (
            f"RateLimiterState(samples_per_insert={repr(<object>self._samples_per_insert)}, "
            f"min_size_to_sample={self._min_size_to_sample}, "
            f"min_diff={repr(<object>self._min_diff)}, max_diff={repr(<object>self._max_diff)}, "
            f"inserts={self._inserts}, samples={self._samples}, deletes={self._deletes})"
        )

    # ----------------------------------------------------------------- internals

    cdef inline bint _below_min_size(self) except -1:
        """``inserts - deletes < min_size_to_sample``, exactly."""
        if _small(self._inserts) and _small(self._deletes):
            return self._inserts - self._deletes < self._min_size_to_sample
        return <object>self._inserts - self._deletes < self._min_size_to_sample

    # ---------------------------------------------------------------- pickling

    def __reduce__(self):
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
