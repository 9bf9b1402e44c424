"""The records a table holds per item and a server per chunk (pure-Python twin).

The compiled twin is ``reverb_py._speedups.records`` (source ``_speedups/records.pyx``);
both have the same constructors, attributes, ``repr`` and pickling.

:class:`LiveChunks` is the server's index of the chunks it holds, by key, that does not
keep them alive: a chunk leaves it when it is freed.

PERF(untracked-records): a server holds one :class:`Item` per item and one
:class:`Chunk` per chunk for as long as they live, hundreds of thousands to millions of
them. The compiled twin's types are not containers of the cyclic garbage collector, and
its :class:`LiveChunks` needs no weak reference objects (this twin's needs one per
chunk), so the collector's full collections, which would visit each of those objects
every time, never see them (with 8 writers filling a table, 11% of the server's CPU went
to those collections, 3.3 µs per item; 0.4 µs with the compiled twin). Neither record is
ever part of a reference cycle the server makes: an item refers to its chunks and its
trajectory bytes, a chunk to its bytes. (A cycle that code of its own makes through an
``Item``'s ``trajectory`` is never collected with the compiled twin.)
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from reverb_py._pure._common import check_key

__all__ = ["Chunk", "Item", "LiveChunks"]


class Item:
    """An item of a table.

    Args:
      key: A uint64 identifying the item within its table.
      priority: The priority the selectors use.
      trajectory: What the item's data is (a ``FlatTrajectory`` on the server); opaque
        to the table.
      chunks: The chunk objects the item references; the table keeps them alive while
        the item is in it.
      episode_ids: The episode id of each referenced chunk (for ``num_episodes``).
      times_sampled: How many times the item has been sampled (restores set it).
      inserted_at: Insertion time in nanoseconds since the epoch (0: set on insert).
    """

    __slots__ = (
        "key",
        "priority",
        "trajectory",
        "chunks",
        "episode_ids",
        "times_sampled",
        "inserted_at",
    )

    def __init__(
        self,
        key: int,
        priority: float,
        trajectory: Any = None,
        chunks: Sequence[Any] = (),
        episode_ids: Sequence[int] = (),
        times_sampled: int = 0,
        inserted_at: int = 0,
    ) -> None:
        self.key = key
        self.priority = priority
        self.trajectory = trajectory
        self.chunks = chunks
        self.episode_ids = episode_ids
        self.times_sampled = times_sampled
        self.inserted_at = inserted_at

    def __repr__(self) -> str:
        return (
            f"Item(key={self.key}, priority={self.priority!r}, "
            f"times_sampled={self.times_sampled}, chunks={len(self.chunks)})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            Item,
            (
                self.key,
                self.priority,
                self.trajectory,
                self.chunks,
                self.episode_ids,
                self.times_sampled,
                self.inserted_at,
            ),
        )


class Chunk:
    """A chunk as the server keeps it: the serialised ``ChunkData`` and its header fields.

    ``steps`` holds, per tensor of ``data.tensors``, how many steps it holds (its first
    dimension; a tensor whose shape has none counts as the sequence range's length).
    ``defect`` says why no slice may reference the chunk (no tensors, an inverted
    sequence range, a tensor no client could decode: see
    ``reverb_py._codec.fields.checked_chunk_header``), or is None. ``key`` and ``data``
    are read-only and a chunk is made once (:class:`LiveChunks` files a chunk by them).
    """

    __slots__ = ("_key", "episode_id", "_data", "steps", "defect", "__weakref__")

    def __init__(
        self,
        key: int,
        episode_id: int,
        data: bytes,
        steps: tuple[int, ...] = (),
        defect: str | None = None,
    ) -> None:
        if hasattr(self, "_key"):
            raise TypeError("A Chunk is made once: its key and data cannot change.")
        self._key = key
        self.episode_id = episode_id
        self._data = data
        self.steps = steps
        self.defect = defect

    @property
    def key(self) -> int:
        return self._key

    @property
    def data(self) -> bytes:
        return self._data

    def __repr__(self) -> str:
        return f"Chunk(key={self.key}, episode_id={self.episode_id}, bytes={len(self.data)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Chunk, (self.key, self.episode_id, self.data, self.steps, self.defect))


class LiveChunks:
    """Chunks by key, each only as long as something else holds it.

    ``add`` keeps the first chunk of a key: while it lives, adding another chunk of the
    same key returns it instead. A chunk leaves when it is freed; it may be in several
    of these at once.
    """

    __slots__ = ("_chunks",)

    def __init__(self) -> None:
        self._chunks: weakref.WeakValueDictionary[int, Chunk] = weakref.WeakValueDictionary()

    def add(self, chunk: Chunk) -> Chunk:
        """Adds ``chunk`` under ``chunk.key`` unless a live chunk has that key; returns
        the chunk the key now names.

        Raises:
          TypeError: ``chunk`` is not a :class:`Chunk`, its key not an integer, or its
            data without a length.
          InvalidArgumentError: its key is out of ``[0, 2**64)``.
        """
        if type(chunk) is not Chunk:
            raise TypeError(f"LiveChunks holds Chunk objects, not {type(chunk).__name__}.")
        key = check_key(chunk.key)
        len(chunk.data)  # Its data has a length (``nbytes``), read before the key is looked up.
        return self._chunks.setdefault(key, chunk)

    def get(self, key: int) -> Chunk | None:
        """The live chunk of ``key``, or None."""
        return self._chunks.get(key)

    def values(self) -> list[Chunk]:
        """Every live chunk, in no particular order."""
        return list(self._chunks.values())

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def nbytes(self) -> int:
        """The summed ``len(chunk.data)`` of the live chunks."""
        return sum(len(chunk.data) for chunk in self.values())
