"""Reverb's ``TFClient``: sample, insert and priority updates as TensorFlow ops.

Each method returns tensors of ``tf.py_function`` calls into a blocking
:class:`reverb_py.Client`, so they run eagerly and inside ``tf.function`` (where they
are stateful ops, kept and ordered by TensorFlow's automatic control dependencies), for
TensorFlow learners that update priorities from their training step. Importing this
module imports TensorFlow; ``reverb_py.TFClient`` resolves here on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

try:
    import tensorflow as tf
except ImportError as _error:
    raise ImportError(
        "reverb_py.tf_client needs TensorFlow: pip install 'reverb_py[tf]'"
    ) from _error

from reverb_py import replay_sample
from reverb_py._codec import nest
from reverb_py.client import Client
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = ["TFClient", "replay_sample"]


class TFClient:
    """Client of a Reverb (or reverb_py) server from TensorFlow code.

    Args:
      server_address: the server's gRPC target.
      shared_name: accepted for Reverb's signature (clients are cheap; nothing is shared).
      name: the prefix of the ops' names.
    """

    def __init__(
        self, server_address: str, shared_name: str | None = None, name: str = "reverb"
    ) -> None:
        self._server_address = server_address
        self._name = name
        self._client = Client(server_address)

    @property
    def server_address(self) -> str:
        return self._server_address

    def sample(self, table: str, data_dtypes: Any, name: str | None = None) -> ReplaySample:
        """Samples one item of ``table`` (blocking while the rate limiter forbids it).

        Returns:
          ``ReplaySample(info, data)``: scalar info tensors, and the item's columns (with
          their time axis) nested as ``data_dtypes``.
        """
        flat_dtypes = [tf.as_dtype(dtype) for dtype in nest.flatten(data_dtypes)]
        info_dtypes = [tf.as_dtype(dtype) for dtype in SampleInfo.dtypes()]

        def run(table_name: Any) -> list[Any]:
            (sample,) = self._client.sample(_text(table_name), 1, emit_timesteps=False)
            assert isinstance(sample, ReplaySample)
            info = [
                np.asarray(value, dtype.as_numpy_dtype)
                for value, dtype in zip(sample.info, info_dtypes)
            ]
            if len(sample.data) != len(flat_dtypes):
                raise ValueError(
                    f"data_dtypes has {len(flat_dtypes)} tensors, the sampled item of table "
                    f"'{_text(table_name)}' has {len(sample.data)}."
                )
            return info + list(sample.data)

        with tf.name_scope(name or f"{self._name}_sample"):
            outputs = tf.py_function(run, [table], info_dtypes + flat_dtypes)
        info = SampleInfo(*(tf.ensure_shape(tensor, []) for tensor in outputs[:5]))
        return ReplaySample(info, nest.unflatten_as(data_dtypes, list(outputs[5:])))

    def insert(
        self, data: Sequence[Any], tables: Any, priorities: Any, name: str | None = None
    ) -> Any:
        """Inserts ``data`` (one step) as an item into each of ``tables`` (``priorities[i]``
        for ``tables[i]``), waiting until the server confirmed them.

        As ``Client.insert``, ``data`` is checked against each table's signature (the
        signatures are fetched once per client): a mismatch, or a table the server does
        not have, fails the op with ``tf.errors.InvalidArgumentError`` and inserts
        nothing.

        Raises:
          ValueError: ``tables`` not a rank-1 string tensor, ``priorities`` not a rank-1
            float64 tensor, or of incompatible shapes.
        """
        tables = tf.convert_to_tensor(tables)
        priorities = tf.convert_to_tensor(priorities)
        if tables.dtype != tf.string or tables.shape.rank != 1:
            raise ValueError("tables must be a string tensor of rank 1")
        if priorities.dtype != tf.float64 or priorities.shape.rank != 1:
            raise ValueError("priorities must be a float64 tensor of rank 1")
        if not tables.shape.is_compatible_with(priorities.shape):
            raise ValueError("priorities and tables must have the same shape")

        def run(names: Any, values: Any, *columns: Any) -> None:
            self._client._insert(
                [column.numpy() for column in columns],
                [
                    (table.decode(), float(priority))
                    for table, priority in zip(names.numpy(), values.numpy())
                ],
            )

        with tf.name_scope(name or f"{self._name}_insert"):
            return tf.py_function(run, [tables, priorities, *data], [])

    def update_priorities(
        self, table: str, keys: Any, priorities: Any, name: str | None = None
    ) -> Any:
        """Sets the priorities of the items ``keys`` of ``table`` (unknown keys ignored)."""

        def run(table_name: Any, key_values: Any, priority_values: Any) -> None:
            updates = dict(
                zip(
                    (int(key) for key in key_values.numpy().reshape(-1)),
                    (float(value) for value in priority_values.numpy().reshape(-1)),
                )
            )
            self._client.mutate_priorities(_text(table_name), updates=updates)

        with tf.name_scope(name or f"{self._name}_update_priorities"):
            return tf.py_function(run, [table, keys, priorities], [])


def _text(value: Any) -> str:
    numpy = getattr(value, "numpy", None)
    if numpy is not None:
        value = numpy()
    return value.decode() if isinstance(value, bytes) else str(value)
