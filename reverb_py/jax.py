"""JAX input of a table: batches prefetched onto devices (imports jax).

:class:`TrajectoryIterator` takes the arguments of
:class:`reverb_py.data.TrajectoryIterator` plus ``prefetch``, ``device`` and ``shard``. It
keeps ``prefetch`` batches in flight to the device (``jax.device_put`` returns before the
copy is done, so the next batches travel while the learner computes). With
``shard=True`` each batch is split along its leading axis over ``devices`` (default: the
local devices), one ``jax.Array`` per leaf sharded with a one-axis mesh.

``data`` goes to the device; ``info`` stays in numpy on the host: its keys are 64-bit
(JAX keeps 32-bit integers unless ``jax_enable_x64``) and priority updates take them from
the host anyway. String columns stay numpy arrays of bytes.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

try:
    import jax
except ImportError as _error:
    raise ImportError("reverb_py.jax needs JAX: pip install 'reverb_py[jax]'") from _error
import numpy as np

from reverb_py import data
from reverb_py._codec import nest
from reverb_py.replay_sample import ReplaySample

__all__ = ["TimestepIterator", "TrajectoryIterator"]


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
        self._buffer: collections.deque[ReplaySample] = collections.deque()
        self._exhausted = False
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

    def _put(self, data: Any) -> Any:
        """``data`` with its numeric leaves on the device, all in one ``device_put``."""
        leaves = nest.flatten(data)
        numeric = [
            index
            for index, leaf in enumerate(leaves)
            if not (isinstance(leaf, np.ndarray) and leaf.dtype.kind in "OSU")
        ]
        # The compiled batch path's arrays are 64-byte aligned: a CPU device then uses
        # them in place rather than copying them.
        placed = jax.device_put([leaves[index] for index in numeric], self._target)
        for index, array in zip(numeric, placed):
            leaves[index] = array
        return nest.unflatten_as(data, leaves)

    def _fill(self) -> None:
        while not self._exhausted and len(self._buffer) < self._prefetch:
            try:
                sample = next(self._host)
            except StopIteration:
                self._exhausted = True
                return
            self._buffer.append(ReplaySample(sample.info, self._put(sample.data)))

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> ReplaySample:
        self._fill()
        if not self._buffer:
            raise StopIteration
        return self._buffer.popleft()

    def close(self) -> None:
        """Closes the streams and drops the prefetched batches. Idempotent."""
        self._host.close()
        self._buffer.clear()
        self._exhausted = True

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class TrajectoryIterator(_DeviceIterator):
    """Whole items of a table on a JAX device (or sharded over devices)."""


class TimestepIterator(_DeviceIterator):
    """Time steps of a table's items on a JAX device (or sharded over devices)."""

    _numpy = data.TimestepIterator
