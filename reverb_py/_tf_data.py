"""Reverb's TensorFlow datasets, ``tf.data.Dataset`` s over the sampling core (imports TF).

``reverb_py.TrajectoryDataset`` and ``reverb_py.TimestepDataset`` resolve here on first
use (``reverb_py.__getattr__``), so importing reverb_py never imports TensorFlow. Each is
a real ``tf.data.Dataset`` with Reverb's constructor and ``from_table_signature``: it
works eagerly, inside ``tf.data`` functions (``interleave``, as Acme builds its learner
input), with ``.batch``, ``.prefetch`` and ``.as_numpy_iterator()``.

Every iterator of a dataset opens its own sampler (:mod:`reverb_py._client.datasets`).
TensorFlow is handed whole blocks of samples, stacked once in numpy (every sample the
buffer holds, up to ``BLOCK`` at a time), through ``from_generator``; ``unbatch`` splits
them inside TensorFlow, so no per-sample Python runs on TensorFlow's side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import numpy as np

try:
    import tensorflow as tf
except ImportError as _error:
    raise ImportError(
        "reverb_py.TrajectoryDataset and TimestepDataset need TensorFlow: "
        "pip install 'reverb_py[tf]'"
    ) from _error

from reverb_py import data
from reverb_py._client import datasets
from reverb_py._codec import nest
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = ["BLOCK", "TimestepDataset", "TrajectoryDataset"]

BLOCK = 256
"""Most samples (timesteps: items) handed to TensorFlow in one block."""


_F = TypeVar("_F", bound=Callable[..., Any])


def _plain(function: _F) -> _F:
    """Keeps AutoGraph out: inside ``interleave`` it would try to convert the clients'
    asyncio code (and warn that it cannot)."""
    return cast(_F, tf.autograph.experimental.do_not_convert(function))


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    numpy = getattr(value, "numpy", None)
    if numpy is not None:
        value = numpy()
    if isinstance(value, bytes):
        return value.decode()
    raise TypeError(f"{what} must be a string (or an eager string tensor), got {value!r}")


def _tf_dtype(dtype: np.dtype[Any]) -> Any:
    return tf.string if dtype.kind == "O" else tf.as_dtype(dtype)


def _tf_shape(shape: Any) -> Any:
    return tf.TensorShape(None if shape is None else list(shape))


class _ReverbDataset(tf.data.Dataset):  # type: ignore[misc]
    _timesteps = False

    @_plain
    def __init__(
        self,
        server_address: Any,
        table: Any,
        dtypes: Any,
        shapes: Any,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
    ) -> None:
        specs = data.flat_specs(dtypes, shapes)
        options = datasets.SamplerOptions(
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
        )
        self._server_address = _text(server_address, "server_address")
        self._table = _text(table, "table")
        self._options = options
        self._specs = specs
        structure = data.lists_to_tuples(dtypes)
        self._structure = structure
        leaves = [tf.TensorSpec(_tf_shape(shape), _tf_dtype(dtype)) for dtype, shape in specs]
        info = SampleInfo(*(tf.TensorSpec([], tf.as_dtype(dtype)) for dtype in SampleInfo.dtypes()))
        self._element_spec = ReplaySample(info, nest.unflatten_as(structure, leaves))
        blocks = tf.nest.map_structure(
            lambda spec: tf.TensorSpec(tf.TensorShape([None]).concatenate(spec.shape), spec.dtype),
            self._element_spec,
        )
        dataset = tf.data.Dataset.from_generator(self._blocks, output_signature=blocks)
        self._dataset = dataset.unbatch()
        super().__init__(self._dataset._variant_tensor)

    @classmethod
    @_plain
    def from_table_signature(
        cls,
        server_address: str,
        table: str,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        get_signature_timeout_secs: int | None = None,
        max_samples: int = -1,
    ) -> Any:
        """A dataset whose dtypes and shapes are the table's signature.

        Raises:
          ValueError: no table of that name, or a table without a signature.
          DeadlineExceededError: the server did not answer within
            ``get_signature_timeout_secs``.
        """
        address = _text(server_address, "server_address")
        name = _text(table, "table")
        _, dtypes, shapes = data.table_specs(address, name, get_signature_timeout_secs)
        return cls(
            address,
            name,
            dtypes,
            shapes,
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
        )

    @_plain
    def _blocks(self) -> Iterator[Any]:
        data.validate_against_table(self._server_address, self._table, self._specs)
        sampler = datasets.Sampler(self._server_address, self._table, self._options, copy=False)
        shape = datasets.timesteps if self._timesteps else datasets.trajectories
        try:
            yield from shape(
                sampler,
                specs=self._specs,
                structure=self._structure,
                batch_size=BLOCK,
                flexible=True,
            )
        finally:
            sampler.close()

    def _inputs(self) -> list[Any]:
        return []

    @property
    def element_spec(self) -> Any:
        return self._element_spec


class TrajectoryDataset(_ReverbDataset):
    """A ``tf.data.Dataset`` of whole items of a Reverb table (Reverb's arguments).

    Elements are ``ReplaySample(info, data)``: ``info`` scalars, ``data`` with the
    structure of ``dtypes`` and ``shapes`` (lists become tuples).
    """


class TimestepDataset(_ReverbDataset):
    """A ``tf.data.Dataset`` of the time steps of a Reverb table's items."""

    _timesteps = True
