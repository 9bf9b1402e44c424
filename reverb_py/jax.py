"""JAX input of a table: batches prefetched onto devices (imports jax).

:class:`TrajectoryIterator` takes the arguments of
:class:`reverb_py.data.TrajectoryIterator` plus ``prefetch``, ``device`` and ``shard``. It
keeps ``prefetch`` batches in flight to the device: a thread of the iterator takes the
host batches and puts them on the device while the learner computes. On one device each
numeric array goes through jaxlib's transfer call directly (:class:`_DirectPut`: what
``jax.device_put`` ends in, without its Python dispatch, which costs a batch of small
arrays more than the transfer); anything else takes one ``jax.device_put`` per batch. With
``shard=True`` each batch is split along its leading axis over ``devices`` (default: the
local devices), one ``jax.Array`` per leaf sharded with a one-axis mesh.

``data`` goes to the device; ``info`` stays in numpy on the host: its keys are 64-bit
(JAX keeps 32-bit integers unless ``jax_enable_x64``) and priority updates take them from
the host anyway. String columns stay numpy arrays of bytes.
"""

from __future__ import annotations

import functools
import inspect
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

try:
    import jax
except ImportError as _error:
    raise ImportError("reverb_py.jax needs JAX: pip install 'reverb_py[jax]'") from _error
import numpy as np

from reverb_py import data
from reverb_py._codec import nest
from reverb_py.replay_sample import ReplaySample

__all__ = ["TimestepIterator", "TrajectoryIterator"]

_END = object()
"""What the transfer thread hands over after the last batch."""

_STOP_WAIT_S = 10.0
"""How long :meth:`_Transfer.stop` waits for the transfer thread."""


class _Transfer:
    """A thread putting the host batches on the device, ``prefetch`` ahead of the
    consumer: the transfer's dispatch runs while the consumer computes or waits for
    samples, not on its thread. Holds no reference to the iterator that owns it (which
    therefore can be collected; collecting it stops the thread)."""

    def __init__(
        self, host: Iterator[ReplaySample], put: Callable[[Any], Any], prefetch: int
    ) -> None:
        self._host = host
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=_transfer,
            args=(host, put, self._queue, self._stopping),
            name="reverb_py-jax-transfer",
            daemon=True,
        )
        self._thread.start()

    def get(self) -> Any:
        """The next batch on the device, ``_END``, or the error that ended the input."""
        return self._queue.get()

    def stop(self, wait: bool = True) -> None:
        """Closes the input and lets the thread end (waiting at most ``_STOP_WAIT_S``)."""
        self._stopping.set()
        close = getattr(self._host, "close", None)
        if close is not None:
            close()
        deadline = time.monotonic() + _STOP_WAIT_S
        while True:
            # Empty the queue, so that a thread waiting to hand over a batch goes on.
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            if not wait or threading.current_thread() is self._thread:
                return
            self._thread.join(0.05)
            if not self._thread.is_alive() or time.monotonic() > deadline:
                return


def _put(target: Any, data: Any) -> Any:
    """``data`` with its numeric leaves on ``target``, all in one ``device_put``."""
    leaves = nest.flatten(data)
    numeric = [
        index
        for index, leaf in enumerate(leaves)
        if not (isinstance(leaf, np.ndarray) and leaf.dtype.kind in "OSU")
    ]
    # The compiled batch path's arrays are 64-byte aligned: a CPU device then uses them
    # in place rather than copying them (nothing writes to them after).
    placed = jax.device_put([leaves[index] for index in numeric], target, **_ALIAS)
    for index, array in zip(numeric, placed):
        leaves[index] = array
    return nest.unflatten_as(data, leaves)


_ALIAS = {"may_alias": True} if "may_alias" in inspect.signature(jax.device_put).parameters else {}


class _DirectPut:
    """Puts numpy arrays on one device through jaxlib's own transfer call, the one
    ``jax.device_put`` ends in, without the ~40 µs of Python dispatch per array before it
    (a learner's batch of small leaves spends more there than in the transfer).

    Taken only where the result is the one ``device_put`` gives: a numpy array whose
    dtype JAX keeps as it is (with ``jax_enable_x64`` off, a float64 or int64 array goes
    through ``device_put``, which narrows it). If this JAX lacks the call or it fails
    once, every batch after goes through :func:`_put`."""

    def __init__(self, device: Any) -> None:
        from jax._src import core
        from jax._src.lib import xla_client

        self._device = device
        self._devices = [device]
        self._sharding = jax.sharding.SingleDeviceSharding(device)
        self._call = xla_client.batched_device_put
        self._shaped = core.ShapedArray
        self._avals: dict[tuple[tuple[int, ...], np.dtype[Any]], Any] = {}
        self._kept: dict[np.dtype[Any], bool] = {}
        self.broken = False

    def put(self, data: Any) -> Any:
        if self.broken:
            return _put(self._device, data)
        leaves = nest.flatten(data)
        rest: list[int] = []
        try:
            for index, leaf in enumerate(leaves):
                if type(leaf) is np.ndarray and self._keeps(leaf.dtype):
                    leaves[index] = self._one(leaf)
                else:
                    rest.append(index)
        except Exception:  # noqa: BLE001 - an internal call of another JAX: use device_put.
            self.broken = True
            return _put(self._device, data)
        if rest:  # strings, narrowed dtypes, scalars: as device_put does them, in one call
            placed = _put(self._device, [leaves[index] for index in rest])
            for index, leaf in zip(rest, placed):
                leaves[index] = leaf
        return nest.unflatten_as(data, leaves)

    def _one(self, leaf: np.ndarray[Any, Any]) -> Any:
        key = (leaf.shape, leaf.dtype)
        aval = self._avals.get(key)
        if aval is None:
            aval = self._avals[key] = self._shaped(leaf.shape, leaf.dtype)
        return self._call(aval, self._sharding, [leaf], self._devices, True)

    def _keeps(self, dtype: np.dtype[Any]) -> bool:
        kept = self._kept.get(dtype)
        if kept is None:
            kept = self._kept[dtype] = dtype.kind in "biufc" and (
                jax.dtypes.canonicalize_dtype(dtype) == dtype
            )
        return kept


def _putter(target: Any) -> Callable[[Any], Any]:
    """How batches go to ``target``: directly for one device where this JAX allows it."""
    if isinstance(target, jax.Device):
        try:
            return _DirectPut(target).put
        except (ImportError, AttributeError):
            pass
    return functools.partial(_put, target)


def _transfer(
    host: Iterator[ReplaySample],
    put: Callable[[Any], Any],
    out: queue.Queue[Any],
    stopping: threading.Event,
) -> None:
    last: Any = _END
    try:
        for sample in host:
            if stopping.is_set():
                return
            out.put(ReplaySample(sample.info, put(sample.data)))
    except BaseException as error:  # Handed to the consumer, raised there.
        last = error
    if not stopping.is_set():
        out.put(last)


class _DeviceIterator:
    _numpy: type[data.TrajectoryIterator] | type[data.TimestepIterator] = data.TrajectoryIterator

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
        prefetch: int = 2,
        device: Any = None,
        shard: bool = False,
        devices: Sequence[Any] | None = None,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> None:
        self._host = self._numpy(
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
        )
        self._setup(prefetch, device, shard, devices, batch_size)

    def _setup(
        self,
        prefetch: int,
        device: Any,
        shard: bool,
        devices: Sequence[Any] | None,
        batch_size: int | None,
    ) -> None:
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch ({prefetch!r}) must be a positive integer")
        self._prefetch = prefetch
        self._transfer: _Transfer | None = None
        self._closed = False
        if shard:
            if batch_size is None:
                raise ValueError("shard=True needs a batch_size (batches are split over devices)")
            if device is not None:
                raise ValueError("give either device or shard=True, not both")
            chosen = list(devices) if devices is not None else jax.local_devices()
            if batch_size % len(chosen):
                raise ValueError(
                    f"batch_size ({batch_size}) must be a multiple of the number of devices "
                    f"({len(chosen)}) to shard batches over them"
                )
            mesh = jax.sharding.Mesh(np.array(chosen), ("batch",))
            self._target: Any = jax.sharding.NamedSharding(
                mesh, jax.sharding.PartitionSpec("batch")
            )
        else:
            if devices is not None:
                raise ValueError("devices is for shard=True; give device for one device")
            self._target = device if device is not None else jax.local_devices()[0]

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
        prefetch: int = 2,
        device: Any = None,
        shard: bool = False,
        devices: Sequence[Any] | None = None,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> Any:
        """An iterator whose dtypes and shapes are the table's signature."""
        credentials = (token, root_certificates, private_key, certificate_chain)
        _, dtypes, shapes = data.table_specs(
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
            prefetch=prefetch,
            device=device,
            shard=shard,
            devices=devices,
            token=token,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
        )

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> ReplaySample:
        transfer = self._transfer
        if transfer is None:
            if self._closed:
                raise StopIteration
            put = _putter(self._target)
            transfer = self._transfer = _Transfer(self._host, put, self._prefetch)
            weakref.finalize(self, transfer.stop, False)
        item = transfer.get()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, BaseException):
            self.close()
            raise item
        return cast(ReplaySample, item)

    def close(self) -> None:
        """Closes the streams, stops the transfers and drops the prefetched batches.
        Idempotent."""
        self._closed = True
        transfer, self._transfer = self._transfer, None
        if transfer is not None:
            transfer.stop()
        else:
            self._host.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class TrajectoryIterator(_DeviceIterator):
    """Whole items of a table on a JAX device (or sharded over devices)."""


class TimestepIterator(_DeviceIterator):
    """Time steps of a table's items on a JAX device (or sharded over devices)."""

    _numpy = data.TimestepIterator
