"""What a sample is: :class:`ReplaySample` (info + data) and :class:`SampleInfo`."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["SampleInfo", "ReplaySample"]


class SampleInfo(NamedTuple):
    """What the server reports about a sampled item.

    Attributes:
      key: The item's key.
      probability: The probability with which the sampler picked it.
      table_size: The table size when it was sampled.
      priority: The item's priority when it was sampled.
      times_sampled: How many times it has been sampled, this time included.
    """

    key: int
    probability: float
    table_size: int
    priority: float
    times_sampled: int

    @classmethod
    def dtypes(cls) -> SampleInfo:
        """The numpy dtype of each field."""
        dtypes = (
            np.dtype(np.uint64),
            np.dtype(np.float64),
            np.dtype(np.int64),
            np.dtype(np.float64),
            np.dtype(np.int32),
        )
        # The fields hold dtypes here, not the values their annotations name (Reverb's API).
        return cls(*dtypes)  # type: ignore[arg-type]

    @classmethod
    def tf_dtypes(cls) -> SampleInfo:
        """Reverb's name for :meth:`dtypes` (numpy dtypes here, not TensorFlow's)."""
        return cls.dtypes()

    @classmethod
    def tf_shapes(cls) -> SampleInfo:
        """Every field is a scalar."""
        return cls((), (), (), (), ())  # type: ignore[arg-type]

    @classmethod
    def zeros(cls) -> SampleInfo:
        return cls(0, 0.0, 0, 0.0, 0)


class ReplaySample(NamedTuple):
    """A sample: its :class:`SampleInfo` and its data (a flat list or the signature nest)."""

    info: SampleInfo
    data: Any
