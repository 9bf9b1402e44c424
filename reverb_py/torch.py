"""PyTorch datasets of a table: ``IterableDataset`` s yielding tensors (imports torch).

:class:`TrajectoryDataset` and :class:`TimestepDataset` take the arguments of
:class:`reverb_py.data.TrajectoryIterator` (Reverb's dataset options, ``batch_size``,
``drop_remainder``) plus ``pin_memory``. Each ``iter()`` opens its own streams, in the
process that iterates, so in a ``DataLoader`` with workers every worker samples on its
own; ``max_samples`` is split between them. The dataset batches already: give the
``DataLoader`` ``batch_size=None``.

**Workers.** gRPC cannot go on in a process forked from one that used it, and a
``DataLoader`` forks its workers by default on Linux. Where the process that builds the
``DataLoader`` runs a reverb_py server or client (it wrote the items, asked
``server_info``), start the workers with ``multiprocessing_context="spawn"`` (or
``"forkserver"``) and guard the script's main code, as spawned workers import it again::

    import torch.utils.data
    import reverb_py
    import reverb_py.torch as reverb_torch

    def main():
        server = reverb_py.Server(tables, port=None)  # and actors writing to it
        dataset = reverb_torch.TrajectoryDataset.from_table_signature(
            f"localhost:{server.port}", "replay", 64, batch_size=256
        )
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn",
            pin_memory=True,
        )
        for batch in loader:
            ...

    if __name__ == "__main__":
        main()

A forked worker of such a process raises :class:`~reverb_py.errors.UsageError` saying
so. A parent that never touched gRPC (``from_table_signature`` reads the signature in
each worker, not in the parent) can keep the default fork.

**Tensors.** Numeric arrays become tensors without a copy (``torch.from_numpy``); string
columns stay numpy arrays of bytes. Keys are ``torch.int64`` (see :func:`to_tensors`);
:func:`update_priorities` sends new priorities for them. Pinned memory is the
``DataLoader``'s job, as in PyTorch: ``DataLoader(pin_memory=True)``.

**TensorDict.** With ``tensordict`` installed (``pip install tensordict``),
:func:`to_tensordict` makes a batch one ``TensorDict`` (TorchRL's container) and
:func:`update_priorities` takes one back.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

try:
    import torch
except ImportError as _error:
    raise ImportError("reverb_py.torch needs PyTorch: pip install 'reverb_py[torch]'") from _error
from torch.utils.data import IterableDataset, get_worker_info

from reverb_py import data, errors
from reverb_py._codec import nest
from reverb_py.client import Client
from reverb_py.replay_sample import ReplaySample, SampleInfo

__all__ = [
    "TimestepDataset",
    "TrajectoryDataset",
    "keys_to_ints",
    "to_tensordict",
    "to_tensors",
    "update_priorities",
]

_KEY_MASK = (1 << 64) - 1

_FORK_MESSAGE = (
    "This process was forked from one that runs a reverb_py server or client, and gRPC "
    "cannot be used after such a fork (it would hang or abort). Start the DataLoader's "
    "workers with spawn: DataLoader(dataset, batch_size=None, num_workers=..., "
    'multiprocessing_context="spawn") (or "forkserver"), with the script\'s main code under '
    'if __name__ == "__main__":.'
)


def _reverb_threads_run() -> bool:
    # NOTE(fork): reverb_py's servers and clients run gRPC on threads of their own, all
    # named "reverb_py-...", and the clients' loop thread lives as long as the process.
    # Such a thread at fork time means gRPC is running in the parent; a child forked
    # then hangs in gRPC's core (or aborts) at its first call. (A server stopped before
    # the fork leaves no thread but gRPC still started: not seen here.)
    return any(thread.name.startswith("reverb_py-") for thread in threading.enumerate())


_fork_state = {"parent_runs_grpc": False, "forked_from_grpc": False}


def _before_fork() -> None:
    _fork_state["parent_runs_grpc"] = _reverb_threads_run()


def _after_fork_in_child() -> None:
    if _fork_state["parent_runs_grpc"]:
        _fork_state["forked_from_grpc"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


def _tensor(value: Any, pin_memory: bool) -> Any:
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        return value
    if not array.flags.writeable:
        array = array.copy()
    tensor = torch.from_numpy(array)
    return tensor.pin_memory() if pin_memory else tensor


def _keys(value: Any, pin_memory: bool) -> Any:
    # NOTE(keys): PyTorch has no arithmetic or indexing for uint64 on most versions; the
    # same 64 bits as int64 work everywhere and go back unchanged (update_priorities).
    return _tensor(np.asarray(value, dtype=np.uint64).view(np.int64), pin_memory)


def to_tensors(sample: ReplaySample, *, pin_memory: bool = False) -> ReplaySample:
    """``sample`` with every numeric leaf of its info and data as a ``torch.Tensor``.

    The keys (``info.key``, uint64 on the server) become ``torch.int64`` tensors of the
    same 64 bits (viewed, not converted): a key of 2**63 or more shows as a negative
    number. :func:`update_priorities` takes them back as they are;
    :meth:`reverb_py.Client.mutate_priorities` takes the server's integers, which
    :func:`keys_to_ints` gives (``keys.view(torch.uint64).tolist()`` too).

    Args:
      sample: a sample of numpy arrays (:mod:`reverb_py.data`).
      pin_memory: copy every tensor into pinned memory (needs an accelerator, as
        ``Tensor.pin_memory``).
    """
    key, *others = sample.info
    info = SampleInfo(_keys(key, pin_memory), *(_tensor(field, pin_memory) for field in others))
    return ReplaySample(
        info, nest.map_structure(lambda leaf: _tensor(leaf, pin_memory), sample.data)
    )


def keys_to_ints(keys: Any) -> list[int]:
    """Sampled keys as the server's unsigned 64-bit integers (a flat list), as
    :meth:`reverb_py.Client.mutate_priorities` takes them.

    Args:
      keys: a tensor, array or sequence of keys: int64 as :func:`to_tensors` gives them
        (negative from 2**63 on), uint64, or integers in [-2**63, 2**64); a negative
        ``k`` is the key ``k + 2**64``.

    Raises:
      ValueError: a key that is not an integer, or out of that range.
    """
    if isinstance(keys, torch.Tensor):
        keys = keys.detach().cpu()
        if keys.dtype == torch.uint64:
            keys = keys.view(torch.int64)
        keys = keys.numpy()
    if isinstance(keys, (np.ndarray, np.generic)):
        if keys.dtype.kind not in "iu":
            raise ValueError(f"Keys must be integers; got an array of {keys.dtype}.")
        keys = np.asarray(keys).reshape(-1).tolist()
    elif not isinstance(keys, Iterable):
        keys = [keys]
    result = []
    for key in keys:
        try:
            value = operator.index(key)
        except TypeError:
            raise ValueError(f"Keys must be integers; got {key!r}.") from None
        if not -(1 << 63) <= value <= _KEY_MASK:
            raise ValueError(f"Key {value} is out of range for a 64-bit key.")
        result.append(value & _KEY_MASK)
    return result


def _tensordict_module() -> Any:
    try:
        import tensordict  # type: ignore[import-not-found, unused-ignore]
    except ImportError as error:
        raise ImportError(
            "reverb_py.torch.to_tensordict needs tensordict: pip install tensordict"
        ) from error
    return tensordict


def _as_mapping(structure: Any) -> Any:
    """A data nest as nested dicts of string keys (leaves kept)."""
    if isinstance(structure, Mapping):
        return {str(key): _as_mapping(value) for key, value in structure.items()}
    if nest.is_namedtuple(structure):
        return {field: _as_mapping(value) for field, value in zip(structure._fields, structure)}
    if isinstance(structure, (list, tuple)):
        return {str(index): _as_mapping(value) for index, value in enumerate(structure)}
    return structure


def to_tensordict(sample: ReplaySample) -> Any:
    """A sample (or batch) as a ``tensordict.TensorDict`` (needs ``tensordict``).

    The data's fields are at the top (a dict's keys; a tuple's or list's positions as
    ``"0"``, ``"1"``, ...; a data that is one tensor under ``"data"``), the info's under
    ``"info"`` (``td["info", "key"]``, ``"probability"``, ``"table_size"``, ``"priority"``,
    ``"times_sampled"``). The batch size is the sample's leading axis: the batch of a
    dataset with ``batch_size``, none for one sample. Numpy leaves become tensors as in
    :func:`to_tensors`; tensors are kept as they are (no copy).

    Args:
      sample: a sample of a :class:`TrajectoryDataset` or :class:`TimestepDataset` (or
        of :mod:`reverb_py.data`).

    Raises:
      ImportError: tensordict is not installed.
      ValueError: the data has a field named ``"info"``.
    """
    tensordict = _tensordict_module()
    info = sample.info
    if not isinstance(info.key, torch.Tensor):
        sample = to_tensors(sample)
        info = sample.info
    fields = _as_mapping(sample.data)
    if not isinstance(fields, dict):
        fields = {"data": fields}
    if "info" in fields:
        raise ValueError(
            "The data has a field named 'info', where to_tensordict puts the sample info."
        )
    fields["info"] = dict(zip(SampleInfo._fields, info))
    keys: Any = info.key
    return tensordict.TensorDict(fields, batch_size=tuple(keys.shape))


def _is_tensordict(value: Any) -> bool:
    # Only a process that imported tensordict can hold one: nothing imported here.
    module = sys.modules.get("tensordict")
    return module is not None and bool(module.is_tensor_collection(value))


def update_priorities(client: Client, table: str, sample: Any, priorities: Any) -> None:
    """Sets new priorities for the items of a sampled batch.

    A key sampled twice in the batch gets its last priority; keys no longer in the table
    are ignored (as :meth:`reverb_py.Client.mutate_priorities`, which this calls).

    Args:
      client: a :class:`reverb_py.Client` of the table's server.
      table: the table.
      sample: the batch: a ``TensorDict`` of :func:`to_tensordict`, a
        :class:`~reverb_py.ReplaySample` or its info, or the keys themselves (any form
        :func:`keys_to_ints` takes).
      priorities: one per key: a tensor (on any device; it is detached), an array, a
        sequence, or, with a ``TensorDict``, the name of its entry that holds them (a
        string or a tuple of strings, e.g. TorchRL's ``"td_error"``).

    Raises:
      ValueError: not one priority per key, or a key that is not a 64-bit key.
    """
    if _is_tensordict(sample):
        keys = sample.get(("info", "key"))
        if isinstance(priorities, str) or (
            isinstance(priorities, tuple) and all(isinstance(part, str) for part in priorities)
        ):
            priorities = sample.get(priorities)
    elif isinstance(sample, ReplaySample):
        keys = sample.info.key
    elif isinstance(sample, SampleInfo):
        keys = sample.key
    else:
        keys = sample
    flat_keys = keys_to_ints(keys)
    if isinstance(priorities, torch.Tensor):
        priorities = priorities.detach().to("cpu", torch.float64).numpy()
    values = np.asarray(priorities, dtype=np.float64).reshape(-1)
    if values.shape[0] != len(flat_keys):
        raise ValueError(
            f"update_priorities needs one priority per key: {len(flat_keys)} keys, "
            f"{values.shape[0]} priorities."
        )
    client.mutate_priorities(table, updates=dict(zip(flat_keys, values.tolist())))


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
            # As DataLoader(pin_memory=True) without an accelerator: said, not refused.
            warnings.warn(
                "pin_memory=True but no accelerator is available: tensors are not pinned.",
                UserWarning,
                stacklevel=3,
            )
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

    def _pins(self) -> bool:
        if not self._pin_memory or not _accelerator():
            return False
        if get_worker_info() is not None:
            # Pinned pages do not cross to the main process: DataLoader(pin_memory=True)
            # pins there, on its own thread.
            warnings.warn(
                "pin_memory=True of the dataset does nothing in a DataLoader worker; "
                "pass DataLoader(pin_memory=True) to pin the batches.",
                UserWarning,
                stacklevel=2,
            )
            return False
        return True

    def __iter__(self) -> Iterator[ReplaySample]:
        if _fork_state["forked_from_grpc"]:
            raise errors.UsageError(_FORK_MESSAGE)
        max_samples = self._worker_max_samples()
        if max_samples == 0:
            return
        pin_memory = self._pins()
        iterator = self._new_iterator(max_samples)
        try:
            for sample in iterator:
                yield to_tensors(sample, pin_memory=pin_memory)
        finally:
            iterator.close()


class TrajectoryDataset(_Dataset):
    """Whole items of a table as tensors (see :class:`reverb_py.data.TrajectoryIterator`).

    An ``IterableDataset``: each ``iter()`` samples on streams of its own, in the process
    that iterates. In a ``DataLoader`` give ``batch_size=None`` (the dataset batches with
    its own ``batch_size``) and, where the building process runs a reverb_py server or
    client, ``multiprocessing_context="spawn"``::

        dataset = TrajectoryDataset.from_table_signature(address, "replay", 64, batch_size=256)
        loader = DataLoader(
            dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn",
            pin_memory=True,
        )

    The arguments are :class:`reverb_py.data.TrajectoryIterator`'s, and:

    Args:
      pin_memory: kept for compatibility: pin each batch when iterated in the main
        process with an accelerator. Without one it warns and does not pin; in a
        ``DataLoader`` worker it does not pin either (pass ``DataLoader(pin_memory=True)``).

    Raises:
      UsageError: (from ``iter()``) this process was forked from one running a reverb_py
        server or client; start the ``DataLoader``'s workers with ``"spawn"``.
    """


class TimestepDataset(_Dataset):
    """Time steps of a table's items as tensors (see
    :class:`reverb_py.data.TimestepIterator`).

    Used as :class:`TrajectoryDataset` (``multiprocessing_context="spawn"`` for a
    ``DataLoader`` made beside a server or client, ``pin_memory`` as there)::

        dataset = TimestepDataset.from_table_signature(address, "steps", 64, batch_size=32)
        loader = DataLoader(
            dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn"
        )
    """

    _iterator = data.TimestepIterator
