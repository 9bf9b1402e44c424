"""Reverb's ``TFClient``: sample, insert and priority updates as TensorFlow ops.

Each method returns tensors of ``tf.py_function`` calls into a blocking
:class:`reverb_py.Client`, so they run eagerly and inside ``tf.function`` (where they
are stateful ops, kept and ordered by TensorFlow's automatic control dependencies), for
TensorFlow learners that update priorities from their training step. ``sample`` is
Reverb's op: a sampler of one sample (on the client's channel) whose first time step it
returns. Importing this module imports TensorFlow; ``reverb_py.TFClient`` resolves here
on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

try:
    import tensorflow as tf
except ImportError as _error:
    raise ImportError(
        "reverb_py.tf_client needs TensorFlow: pip install 'reverb_py[tf]'"
    ) from _error

from reverb_py import errors, replay_sample
from reverb_py._client import datasets
from reverb_py._codec import nest
from reverb_py.client import Client
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = ["TFClient", "replay_sample"]

# Reverb's op: one request of one sample, no more.
_ONE_SAMPLE = datasets.SamplerOptions(max_in_flight_samples_per_worker=1, max_samples=1)


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
        """Samples one item of ``table`` (blocking while the rate limiter forbids it), as
        Reverb's op does: through a sampler of one sample, whose first time step it
        returns.

        Returns:
          ``ReplaySample(info, data)``: scalar info tensors, and the first time step of
          the item's columns (no time axis: an item of one step, as ``insert`` writes,
          comes back as it was inserted), nested as ``data_dtypes``.

        The op fails with ``tf.errors.InvalidArgumentError`` when the item's columns
        differ in length (it is not made of time steps) or ``data_dtypes`` has another
        number of tensors or other dtypes than the item; other errors (a table the
        server does not have: ``NotFoundError``) come as ``tf.errors.UnknownError``
        naming reverb_py's error.
        """
        flat_dtypes = [tf.as_dtype(dtype) for dtype in nest.flatten(data_dtypes)]
        info_dtypes = [tf.as_dtype(dtype) for dtype in SampleInfo.dtypes()]

        def run(table_name: Any) -> list[Any]:
            info, columns = self._sample_first_step(_text(table_name))
            if len(columns) != len(flat_dtypes):
                raise errors.InvalidArgumentError(
                    "Number of tensors in the replay sample did not match the expected "
                    f"count. Got {len(columns) + len(info_dtypes)} but wanted "
                    f"{len(flat_dtypes) + len(info_dtypes)}"
                )
            for index, (column, dtype) in enumerate(zip(columns, flat_dtypes)):
                if column.dtype != np.dtype(dtype.as_numpy_dtype):
                    raise errors.InvalidArgumentError(
                        f"The sampled item of table '{_text(table_name)}' has a tensor of "
                        f"dtype {column.dtype} at flattened index {index}; data_dtypes "
                        f"asks for {dtype.name}."
                    )
            values = [
                np.asarray(value, dtype.as_numpy_dtype) for value, dtype in zip(info, info_dtypes)
            ]
            return values + columns

        with tf.name_scope(name or f"{self._name}_sample"):
            outputs = tf.py_function(run, [table], info_dtypes + flat_dtypes)
        info = SampleInfo(*(tf.ensure_shape(tensor, []) for tensor in outputs[:5]))
        return ReplaySample(info, nest.unflatten_as(data_dtypes, list(outputs[5:])))

    def _sample_first_step(self, table: str) -> tuple[SampleInfo, list[np.ndarray]]:
        """One sample's info and its first time step (a squeezed column is one step).

        Raises:
          InvalidArgumentError: columns of different lengths, or a step that does not
            match the table's signature.
        """
        client = self._client._client  # its channel, on the loop the sampler runs on
        sampler = datasets.Sampler(
            self._server_address,
            table,
            _ONE_SAMPLE,
            channel=lambda: (client.channel(), client._num_shards()),
        )
        try:
            pieces = sampler.take()
        finally:
            sampler.close()
        if not pieces:
            raise errors.InternalError(f"The sampler of table '{table}' ended without a sample.")
        info, columns, squeezed = cast(datasets.Sample, pieces[0])
        lengths = {1 if flag else len(column) for column, flag in zip(columns, squeezed)}
        if len(lengths) > 1:
            raise errors.InvalidArgumentError(
                "Sampled trajectory cannot be decomposed into timesteps."
            )
        step = [column if flag else column[0] for column, flag in zip(columns, squeezed)]
        # As Reverb's op, the step is checked against the table's signature (if any).
        signature = self._client._run(self._client._client._flat_signatures()).get(table)
        if signature is not None:
            specs = [(spec.dtype, spec.shape) for _, spec in signature]
            datasets._Checker(table, specs).check(step)
        return info, step

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
