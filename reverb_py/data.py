"""Learner input without a framework: Reverb's datasets as numpy iterators.

:class:`TrajectoryIterator` and :class:`TimestepIterator` take the arguments of Reverb's
``TrajectoryDataset`` and ``TimestepDataset`` (and ``from_table_signature``), plus
``batch_size`` and ``drop_remainder``. Iterating yields :class:`~reverb_py.ReplaySample`
values with numpy arrays: one per sample (per time step), or with ``batch_size`` one per
batch, every field stacked along a new leading axis::

    samples = reverb_py.data.TrajectoryIterator.from_table_signature(
        "localhost:8000", "replay", max_in_flight_samples_per_worker=512, batch_size=256
    )
    for batch in samples:
        learn(batch.data, batch.info.key)

An iterator opens its streams on the first ``next()`` and closes them at :meth:`close`,
at the end of a ``with`` block, at the end of the iteration, or when it is garbage
collected. A stream that fails (the server stopped or cannot be reached) raises its error
from ``next()``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from reverb_py import errors
from reverb_py._client import datasets
from reverb_py._client.credentials import ClientCredentials
from reverb_py._client.sampling import DEFAULT_WAIT_REPORT_S
from reverb_py._codec import nest
from reverb_py._codec.dtypes import normalize_dtype, tf_dtype_name
from reverb_py._codec.signature import flatten_signature
from reverb_py.client import Client
from reverb_py.replay_sample import ReplaySample
from reverb_py.tensor_spec import normalize_shape, shapes_compatible

__all__ = [
    "TimestepIterator",
    "TrajectoryIterator",
    "flat_specs",
    "lists_to_tuples",
    "table_specs",
    "validate_against_table",
]

_logger = logging.getLogger("reverb_py")

VALIDATION_TIMEOUT_S = 30.0
"""How long an iterator waits for the table's signature before sampling unchecked."""


def lists_to_tuples(structure: Any) -> Any:
    """Reverb's datasets turn every list of a nest into a tuple."""
    if isinstance(structure, list):
        return tuple(lists_to_tuples(value) for value in structure)
    if isinstance(structure, dict):
        return type(structure)((key, lists_to_tuples(value)) for key, value in structure.items())
    if nest.is_namedtuple(structure):
        return type(structure)(*(lists_to_tuples(value) for value in structure))
    if isinstance(structure, tuple):
        return tuple(lists_to_tuples(value) for value in structure)
    return structure


def _flatten_up_to(structure: Any, values: Any, path: str = "") -> list[Any]:
    """``values`` split along ``structure``'s containers (its leaves kept whole)."""
    if not nest.is_nested(structure):
        return [values]
    if isinstance(structure, dict):
        same_kind = isinstance(values, dict)
    else:
        same_kind = isinstance(values, (list, tuple))
    if not same_kind:
        raise ValueError(
            f"dtypes and shapes do not have the same structure (at {path or 'the root'}: "
            f"{type(structure).__name__} vs {type(values).__name__})."
        )
    if isinstance(structure, dict):
        if sorted(structure) != sorted(values):
            raise ValueError(
                f"dtypes and shapes do not have the same structure (keys at "
                f"{path or 'the root'}: {sorted(structure)} vs {sorted(values)})."
            )
        children = [(key, structure[key], values[key]) for key in sorted(structure)]
    else:
        if len(structure) != len(values):
            raise ValueError(
                f"dtypes and shapes do not have the same structure (lengths at "
                f"{path or 'the root'}: {len(structure)} vs {len(values)})."
            )
        children = [(index, a, b) for index, (a, b) in enumerate(zip(structure, values))]
    flat: list[Any] = []
    for key, child, value in children:
        flat.extend(_flatten_up_to(child, value, f"{path}/{key}" if path else str(key)))
    return flat


def flat_specs(dtypes: Any, shapes: Any) -> list[datasets.Spec]:
    """Each leaf's (dtype, shape), ``shapes`` split along the structure of ``dtypes``.

    Raises:
      ValueError: the two do not share a structure.
      TypeError: a leaf that is not a dtype or a shape.
    """
    flat_dtypes = nest.flatten(dtypes)
    flat_shapes = _flatten_up_to(dtypes, shapes)
    return [
        (normalize_dtype(dtype), normalize_shape(shape))
        for dtype, shape in zip(flat_dtypes, flat_shapes)
    ]


def table_specs(
    server_address: str,
    table: str,
    timeout: float | None = None,
    *,
    credentials: tuple[Any, ...] = (),
) -> tuple[Any, Any, Any]:
    """The table's signature and its dtypes and shapes (Reverb's ``from_table_signature``).

    Raises:
      ValueError: no table of that name, or a table without a signature.
      DeadlineExceededError: the server did not answer within ``timeout`` seconds.
    """
    info = Client(server_address, *credentials).server_info(timeout)
    if table not in info:
        raise ValueError(
            f"Server at {server_address} does not contain any table named {table}. "
            f"Found: {', '.join(sorted(info))}."
        )
    signature = info[table].signature
    if not signature:
        raise ValueError(f"Table {table} at {server_address} does not have a signature.")
    dtypes = nest.map_structure(lambda spec: spec.dtype, signature)
    shapes = nest.map_structure(lambda spec: spec.shape, signature)
    return signature, dtypes, shapes


def validate_against_table(
    server_address: str,
    table: str,
    specs: Sequence[datasets.Spec],
    timeout: float = VALIDATION_TIMEOUT_S,
    *,
    credentials: tuple[Any, ...] = (),
) -> None:
    """Checks the requested specs against the table's signature, as Reverb's iterators do.

    A table without a signature (or unknown to the server: sampling then fails) is not
    checked; a server that does not answer within ``timeout`` is logged and not checked.

    Raises:
      InvalidArgumentError: a different number of tensors, or an incompatible one.
    """
    try:
        info = Client(server_address, *credentials).server_info(timeout)
    except errors.DeadlineExceededError:
        _logger.warning(
            "Unable to validate shapes and dtypes of new sampler for '%s' as server could "
            "not be reached in time (%ss); sampling without validating them.",
            table,
            timeout,
        )
        return
    if table not in info or info[table].signature is None:
        return
    flat = flatten_signature(info[table].signature)
    signature = [spec for _, spec in flat]
    table_string = datasets.specs_string([(name, spec.dtype, spec.shape) for name, spec in flat])
    if len(signature) != len(specs):
        raise errors.InvalidArgumentError(
            f"Inconsistent number of tensors requested from table '{table}'.  Requested "
            f"{len(specs)} tensors, but table signature shows {len(signature)} tensors.  "
            f"Table signature: {table_string}"
        )
    for index, (spec, (dtype, shape)) in enumerate(zip(signature, specs)):
        if spec.dtype != dtype or not shapes_compatible(spec.shape, shape):
            raise errors.InvalidArgumentError(
                f"Requested incompatible tensor at flattened index {index} from table "
                f"'{table}'.  Requested (dtype, shape): ({tf_dtype_name(dtype)}, "
                f"{datasets.format_shape(shape)}).  Signature (dtype, shape): "
                f"({tf_dtype_name(spec.dtype)}, {datasets.format_shape(spec.shape)}).  "
                f"Table signature: {table_string}"
            )


class _SampleIterator:
    """What both iterators share: options, lazy start, closing."""

    _timesteps = False

    def __init__(
        self,
        server_address: str,
        table: str,
        dtypes: Any,
        shapes: Any,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        max_samples: int = -1,
        *,
        batch_size: int | None = None,
        drop_remainder: bool = False,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
        wait_report_s: float | None = DEFAULT_WAIT_REPORT_S,
    ) -> None:
        self._wait_report_s = wait_report_s
        # As a Client's: None reads REVERB_PY_TOKEN / REVERB_PY_TOKEN_FILE.
        self._credential_args = (token, root_certificates, private_key, certificate_chain)
        self._credentials = ClientCredentials(*self._credential_args)
        if (dtypes is None) != (shapes is None):
            raise ValueError("dtypes and shapes must both be given or both be None.")
        self._specs = None if dtypes is None else flat_specs(dtypes, shapes)
        self._structure = None if dtypes is None else lists_to_tuples(dtypes)
        self._options = datasets.SamplerOptions(
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
        )
        if batch_size is not None:
            batch_size = datasets._integer("batch_size", batch_size)
            if batch_size < 1:
                raise ValueError(f"batch_size ({batch_size}) must be a positive integer or None")
        self._server_address = server_address
        self._table = table
        self._batch_size = batch_size
        self._drop_remainder = bool(drop_remainder)
        self._sampler: datasets.Sampler | None = None
        self._samples: Iterator[ReplaySample] | None = None
        self._finished = False

    @classmethod
    def from_table_signature(
        cls,
        server_address: str,
        table: str,
        max_in_flight_samples_per_worker: int,
        num_workers_per_iterator: int = -1,
        max_samples_per_stream: int = -1,
        rate_limiter_timeout_ms: int = -1,
        get_signature_timeout_secs: float | None = None,
        max_samples: int = -1,
        *,
        batch_size: int | None = None,
        drop_remainder: bool = False,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
        wait_report_s: float | None = DEFAULT_WAIT_REPORT_S,
    ) -> Any:
        """An iterator whose dtypes and shapes are the table's signature.

        Raises:
          ValueError: no table of that name, or a table without a signature.
          DeadlineExceededError: the server did not answer within
            ``get_signature_timeout_secs``.
        """
        credentials = (token, root_certificates, private_key, certificate_chain)
        _, dtypes, shapes = table_specs(
            server_address, table, get_signature_timeout_secs, credentials=credentials
        )
        return cls(
            server_address,
            table,
            dtypes,
            shapes,
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
            batch_size=batch_size,
            drop_remainder=drop_remainder,
            token=token,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
            wait_report_s=wait_report_s,
        )

    @property
    def server_address(self) -> str:
        return self._server_address

    @property
    def table(self) -> str:
        return self._table

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> ReplaySample:
        samples = self._samples
        if samples is None:
            if self._finished:
                raise StopIteration
            samples = self._start()
        try:
            return next(samples)
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise

    def _start(self) -> Iterator[ReplaySample]:
        if self._specs is not None:
            validate_against_table(
                self._server_address, self._table, self._specs, credentials=self._credential_args
            )
        sampler = datasets.Sampler(
            self._server_address,
            self._table,
            self._options,
            copy=self._batch_size is None,
            credentials=self._credentials,
            batch=None if self._timesteps else self._batch_size,
            wait_report_s=self._wait_report_s,
        )
        shape = datasets.timesteps if self._timesteps else datasets.trajectories
        self._sampler = sampler
        self._samples = shape(
            sampler,
            specs=self._specs,
            structure=self._structure,
            batch_size=self._batch_size,
            drop_remainder=self._drop_remainder,
        )
        # Collected without close(): the streams are cancelled (never waited for).
        weakref.finalize(self, sampler.close, False)
        return self._samples

    def close(self) -> None:
        """Closes the streams; the iteration ends. Idempotent."""
        self._finished = True
        sampler, self._sampler = self._sampler, None
        self._samples = None
        if sampler is not None:
            sampler.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(server_address={self._server_address!r}, "
            f"table={self._table!r}, batch_size={self._batch_size})"
        )


class TrajectoryIterator(_SampleIterator):
    """Whole items of a table, as Reverb's ``TrajectoryDataset`` yields them, in numpy.

    Args:
      server_address: the server's gRPC target.
      table: the table to sample.
      dtypes: the data's dtypes, a nest (lists become tuples), or None with ``shapes``
        None: no check, the data is the flat list of the item's columns.
      shapes: the data's shapes (with the time axis; none for squeezed columns).
      max_in_flight_samples_per_worker: samples asked for per request (≥ 1); the
        buffer holds at most this many per worker.
      num_workers_per_iterator: streams in parallel (-1: 1).
      max_samples_per_stream: samples per stream before it is re-opened (-1: 10,000).
      rate_limiter_timeout_ms: how long the server may wait on the rate limiter
        (-1: forever); a timeout while the iterator waits ends the iteration.
      max_samples: samples in all (-1: no limit); no more are asked for.
      batch_size: yield batches of this many samples (None: single samples).
      drop_remainder: drop a last batch smaller than ``batch_size``.
      wait_report_s: while it waits without a sample, log (INFO, logger ``reverb_py``)
        what the table's rate limiter waits for, every this many seconds (None: never).

    Raises:
      ValueError: an option out of range, or dtypes and shapes of different structure.
    """


class TimestepIterator(_SampleIterator):
    """The time steps of a table's items, as Reverb's ``TimestepDataset`` yields them.

    Arguments as :class:`TrajectoryIterator`; ``shapes`` describe one step. With
    ``batch_size`` a batch holds that many consecutive steps, possibly of several items.
    """

    _timesteps = True
