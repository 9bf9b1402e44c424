"""Rate limiters: when a table lets inserts and samples proceed.

A rate limiter keeps three counters for its table: ``inserts`` (new items), ``samples``
(items handed out) and ``deletes`` (items removed for any reason), and four settings:
``samples_per_insert`` (spi), ``min_size_to_sample``, ``min_diff`` and ``max_diff``.
The table size is ``inserts - deletes``. With ``n`` the number of calls asked for:

* an insert may proceed if ``inserts + n - deletes <= min_size_to_sample`` (the table is
  still filling up), otherwise iff ``(inserts + n) * spi - samples <= max_diff``;
* a sample may proceed iff ``inserts - deletes >= min_size_to_sample`` and
  ``inserts * spi - samples - n >= min_diff``.

Deletes never give back capacity in the ratio term: evictions, ``max_times_sampled``
deletions and explicit deletes only count through the table size. Re-inserting an
existing key updates its priority without counting as an insert, but still waits until
an insert may proceed. A table reset sets all counters to 0.

A call that may not proceed waits (without blocking the event loop) until the other
side makes room, its timeout passes, or it is cancelled. Settings where one side can
only proceed after the other (a ``max_diff`` below ``spi * min_size_to_sample``) deadlock
a single-threaded actor-learner loop; :class:`SampleToInsertRatio` warns about them.
"""

from __future__ import annotations

import logging
import sys

from reverb_py import _impl

__all__ = ["RateLimiter", "MinSize", "SampleToInsertRatio", "Queue", "Stack"]

_logger = logging.getLogger("reverb_py")


class RateLimiter:
    """A rate limiter with explicit settings (see the module docstring for the rules).

    Args:
      samples_per_insert: How many samples each insert allows, on average. Must be > 0.
      min_size_to_sample: The table size below which sampling is blocked. Must be >= 1.
      min_diff: The lowest ``inserts * spi - samples`` that still allows a sample.
      max_diff: The highest ``inserts * spi - samples`` that still allows an insert.

    Raises:
      ValueError: ``samples_per_insert <= 0`` or ``min_size_to_sample < 1`` (Reverb
        aborts the process on these).

    A rate limiter belongs to one table; handing the same object to a second table
    raises ``ValueError``.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        min_diff: float,
        max_diff: float,
    ) -> None:
        if not samples_per_insert > 0:
            raise ValueError(f"samples_per_insert ({samples_per_insert}) must be a positive number")
        if min_size_to_sample < 1:
            raise ValueError(
                f"min_size_to_sample ({min_size_to_sample}) must be a positive integer"
            )
        self._samples_per_insert = float(samples_per_insert)
        self._min_size_to_sample = int(min_size_to_sample)
        self._min_diff = float(min_diff)
        self._max_diff = float(max_diff)
        self._table_name: str | None = None

    @property
    def samples_per_insert(self) -> float:
        return self._samples_per_insert

    @property
    def min_size_to_sample(self) -> int:
        return self._min_size_to_sample

    @property
    def min_diff(self) -> float:
        return self._min_diff

    @property
    def max_diff(self) -> float:
        return self._max_diff

    def new_state(self) -> _impl.RateLimiterState:
        """Returns fresh engine state (counters at 0) with these settings."""
        return _impl.RateLimiterState(
            self._samples_per_insert, self._min_size_to_sample, self._min_diff, self._max_diff
        )

    def _bind(self, table_name: str) -> None:
        if self._table_name is not None:
            raise ValueError(
                f"This rate limiter is already used by table '{self._table_name}'; "
                "every table needs its own rate limiter object."
            )
        self._table_name = table_name

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RateLimiter):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[float, int, float, float]:
        return (self._samples_per_insert, self._min_size_to_sample, self._min_diff, self._max_diff)

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={self._samples_per_insert!r}, "
            f"min_diff={self._min_diff!r}, max_diff={self._max_diff!r}, "
            f"min_size_to_sample={self._min_size_to_sample!r})"
        )


class MinSize(RateLimiter):
    """Blocks sampling until the table holds ``min_size_to_sample`` items.

    Inserts are never blocked. Equivalent to
    ``RateLimiter(1.0, min_size_to_sample, -sys.float_info.max, sys.float_info.max)``.

    Raises:
      ValueError: ``min_size_to_sample < 1``.
    """

    def __init__(self, min_size_to_sample: int) -> None:
        if min_size_to_sample < 1:
            raise ValueError(
                f"min_size_to_sample ({min_size_to_sample}) must be a positive integer"
            )
        super().__init__(1.0, min_size_to_sample, -sys.float_info.max, sys.float_info.max)


class SampleToInsertRatio(RateLimiter):
    """Keeps the number of samples per insert close to ``samples_per_insert``.

    Stage 1 (table smaller than ``min_size_to_sample``): inserts proceed, samples wait,
    as with :class:`MinSize`. Stage 2: the limiter keeps the error
    ``inserts * spi - samples`` inside ``[min_diff, max_diff]``: inserts wait above it,
    samples wait below it. A table can fall back to stage 1 when items are removed.

    Args:
      samples_per_insert: The average number of times each item should be sampled.
      min_size_to_sample: The table size where stage 2 begins.
      error_buffer: A number ``b`` gives ``[spi * min_size - b, spi * min_size + b]``
        (the offset makes the error count only what happens after stage 1); a pair
        ``(min_diff, max_diff)`` is used as it is.

    Raises:
      ValueError: ``samples_per_insert <= 0``; the range is narrower than
        ``2 * max(1.0, samples_per_insert)``; ``min_diff`` is above
        ``spi * min_size_to_sample`` (certain deadlock); ``min_size_to_sample < 1``.
        Checked in this order, as Reverb does.

    A ``max_diff`` below ``spi * min_size_to_sample`` is allowed but logs a warning: it
    deadlocks unless sampling can run concurrently with inserting.
    """

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
    ) -> None:
        if isinstance(error_buffer, (int, float)):
            offset = samples_per_insert * min_size_to_sample
            min_diff = offset - error_buffer
            max_diff = offset + error_buffer
        else:
            min_diff, max_diff = error_buffer
        if not samples_per_insert > 0:
            raise ValueError(f"samples_per_insert ({samples_per_insert}) must be a positive number")
        if max_diff - min_diff < 2 * max(1.0, samples_per_insert):
            raise ValueError(
                "The size of error_buffer must be >= 2 * max(1.0, samples_per_insert) "
                "as smaller values could completely block samples and/or insert calls."
            )
        if max_diff < samples_per_insert * min_size_to_sample:
            _logger.warning(
                "The range covered by error_buffer is below "
                "samples_per_insert * min_size_to_sample. If the sampler cannot "
                "sample concurrently, this will result in a deadlock as soon as "
                "min_size_to_sample items have been inserted."
            )
        if min_diff > samples_per_insert * min_size_to_sample:
            raise ValueError(
                "The range covered by error_buffer is above "
                "samples_per_insert * min_size_to_sample. This will result in a "
                "deadlock as soon as min_size_to_sample items have been inserted."
            )
        if min_size_to_sample < 1:
            raise ValueError(
                f"min_size_to_sample ({min_size_to_sample}) must be a positive integer"
            )
        super().__init__(samples_per_insert, min_size_to_sample, min_diff, max_diff)


class Queue(RateLimiter):
    """Makes a table a bounded queue. Use :meth:`Table.queue` rather than this directly.

    Inserts wait while the queue holds ``size`` items; samples wait while it is empty.
    Must be used with Fifo sampler and remover and ``max_times_sampled=1``.
    """

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(size))


class Stack(RateLimiter):
    """Makes a table a bounded stack. Use :meth:`Table.stack` rather than this directly.

    Same limits as :class:`Queue`; must be used with Lifo sampler and remover and
    ``max_times_sampled=1``.
    """

    def __init__(self, size: int) -> None:
        super().__init__(1.0, 1, 0.0, float(size))
