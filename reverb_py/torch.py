"""PyTorch datasets of a table: ``IterableDataset`` s yielding tensors (imports torch).

:class:`TrajectoryDataset` and :class:`TimestepDataset` take the arguments of
:class:`reverb_py.data.TrajectoryIterator` (Reverb's dataset options, ``batch_size``,
``drop_remainder``) plus ``pin_memory``. Each ``iter()`` opens its own streams, in the
process that iterates: with ``DataLoader(dataset, batch_size=None, num_workers=n)`` every
worker samples on its own and nothing is shared after the fork. ``from_table_signature``
reads the signature in the iterating process too, so the process that builds the
``DataLoader`` never has to talk to the server (gRPC cannot continue in a child forked
while its parent's gRPC client runs). ``max_samples`` is split between a loader's workers.

Numeric arrays become tensors without a copy (``torch.from_numpy``); string columns stay
numpy arrays of bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

try:
    import torch
except ImportError as _error:
    raise ImportError("reverb_py.torch needs PyTorch: pip install 'reverb_py[torch]'") from _error
from torch.utils.data import IterableDataset, get_worker_info

from reverb_py import data
from reverb_py._codec import nest
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = ["TimestepDataset", "TrajectoryDataset", "to_tensors"]


def _tensor(value: Any, pin_memory: bool) -> Any:
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        return value
    if not array.flags.writeable:
        array = array.copy()
    tensor = torch.from_numpy(array)
    return tensor.pin_memory() if pin_memory else tensor


def to_tensors(sample: ReplaySample, *, pin_memory: bool = False) -> ReplaySample:
    """``sample`` with every numeric leaf of its info and data as a ``torch.Tensor``."""
    info = SampleInfo(*(_tensor(field, pin_memory) for field in sample.info))
    return ReplaySample(
        info, nest.map_structure(lambda leaf: _tensor(leaf, pin_memory), sample.data)
    )


class _Dataset(IterableDataset[ReplaySample]):  # type: ignore[misc]
    _iterator: type[data.TrajectoryIterator] | type[data.TimestepIterator] = data.TrajectoryIterator

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
        pin_memory: bool = False,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> None:
        super().__init__()
        self._arguments: dict[str, Any] = {
            "server_address": server_address,
            "table": table,
            "dtypes": dtypes,
            "shapes": shapes,
            "max_in_flight_samples_per_worker": max_in_flight_samples_per_worker,
            "num_workers_per_iterator": num_workers_per_iterator,
            "max_samples_per_stream": max_samples_per_stream,
            "rate_limiter_timeout_ms": rate_limiter_timeout_ms,
            "batch_size": batch_size,
            "drop_remainder": drop_remainder,
            "token": token,
            "root_certificates": root_certificates,
            "private_key": private_key,
            "certificate_chain": certificate_chain,
        }
        self._from_signature: float | None | bool = False
        self._max_samples = max_samples
        self._pin_memory = bool(pin_memory)
        if self._pin_memory and not _accelerator():
            raise ValueError("pin_memory=True needs an accelerator (CUDA); none is available.")
        # Checked now, in the process that builds the dataset (opens nothing).
        self._new_iterator(max_samples)

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
        pin_memory: bool = False,
        token: str | None = None,
        root_certificates: bytes | str | None = None,
        private_key: bytes | str | None = None,
        certificate_chain: bytes | str | None = None,
    ) -> Any:
        """A dataset whose dtypes and shapes are the table's signature, read by each
        iterating process when it starts (errors as
        :meth:`reverb_py.data.TrajectoryIterator.from_table_signature`, raised there)."""
        dataset = cls(
            server_address,
            table,
            None,
            None,
            max_in_flight_samples_per_worker,
            num_workers_per_iterator,
            max_samples_per_stream,
            rate_limiter_timeout_ms,
            max_samples,
            batch_size=batch_size,
            drop_remainder=drop_remainder,
            pin_memory=pin_memory,
            token=token,
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
        )
        dataset._from_signature = get_signature_timeout_secs
        return dataset

    def _new_iterator(self, max_samples: int) -> data.TrajectoryIterator | data.TimestepIterator:
        arguments = dict(self._arguments, max_samples=max_samples)
        if self._from_signature is False:
            return self._iterator(**arguments)
        del arguments["dtypes"], arguments["shapes"]
        return self._iterator.from_table_signature(  # type: ignore[no-any-return]
            get_signature_timeout_secs=self._from_signature, **arguments
        )

    def _worker_max_samples(self) -> int:
        worker = get_worker_info()
        if worker is None or self._max_samples == -1:
            return self._max_samples
        share, extra = divmod(self._max_samples, int(worker.num_workers))
        return share + (1 if int(worker.id) < extra else 0)

    def __iter__(self) -> Iterator[ReplaySample]:
        max_samples = self._worker_max_samples()
        if max_samples == 0:
            return
        iterator = self._new_iterator(max_samples)
        try:
            for sample in iterator:
                yield to_tensors(sample, pin_memory=self._pin_memory)
        finally:
            iterator.close()


def _accelerator() -> bool:
    return bool(torch.cuda.is_available())


class TrajectoryDataset(_Dataset):
    """Whole items of a table as tensors (see :class:`reverb_py.data.TrajectoryIterator`)."""


class TimestepDataset(_Dataset):
    """Time steps of a table's items as tensors (see
    :class:`reverb_py.data.TimestepIterator`)."""

    _iterator = data.TimestepIterator
