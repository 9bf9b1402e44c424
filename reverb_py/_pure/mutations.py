"""MutatePriorities hot paths: the request's wire format and a table's batch update
(pure-Python twin).

The compiled twin is ``reverb_py._speedups.mutations`` (source ``_speedups/mutations.pyx``);
both have the same API and the same results, and raise the same errors.

* :func:`encode_mutate_request` writes the request a client sends.
* :func:`decode_mutate_request` reads it on the server, straight into lists (Reverb's
  field numbers: table = 1, updates = 2 ``KeyWithPriority{key = 1, priority = 2}``,
  delete_keys = 3, packed or not). This twin parses with protobuf, the reference for
  what is accepted; the compiled twin reads the wire format itself.
* :func:`select_updates` and :func:`assign_priorities` are the two halves of
  ``Table.mutate``'s update step around the selectors' all-or-nothing ``update_many``.
* :class:`ItemMap` is a table's ``dict`` of items by key; the compiled twin keeps an
  index of its own beside the ``dict`` for :func:`select_updates`.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from reverb_py._proto import reverb_service_pb2
from reverb_py._pure._common import KEY_MAX, check_key
from reverb_py._pure.wire import length_delimited
from reverb_py.errors import InvalidArgumentError

__all__ = [
    "ItemMap",
    "assign_priorities",
    "decode_mutate_request",
    "encode_mutate_request",
    "select_updates",
]

_MALFORMED = (
    "Malformed MutatePrioritiesRequest: corrupt wire format or a table name that is not UTF-8."
)

_FromString = reverb_service_pb2.MutatePrioritiesRequest.FromString

Array = npt.NDArray[Any]


_VARINT_SHIFTS: Final = np.arange(0, 70, 7, dtype=np.uint64)
_VARINT_LIMITS: Final = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_VARINT_COLUMNS: Final = np.arange(10)


def _varint_matrix(values: npt.NDArray[np.uint64]) -> tuple[Array, Array]:
    """The varint bytes of every value, one row of 10 per value, and each row's width."""
    widths = (values[:, None] >= _VARINT_LIMITS).sum(axis=1) + 1
    groups = ((values[:, None] >> _VARINT_SHIFTS) & np.uint64(0x7F)).astype(np.uint8)
    groups[_VARINT_COLUMNS < (widths - 1)[:, None]] |= 0x80
    return groups, widths


def _as_uint64(values: list[Any]) -> npt.NDArray[np.uint64] | None:
    """``values`` as uint64 if every one is an integer in [0, 2**64), else None."""
    if not set(map(type, values)) <= {int}:
        return None
    if values and (min(values) < 0 or max(values) >= 2**64):
        return None  # numpy 1.x would wrap a negative key around (with a warning).
    try:
        return np.fromiter(values, dtype=np.uint64, count=len(values))
    except (OverflowError, ValueError):
        return None


def encode_mutate_request(
    table: str, updates: Mapping[int, float] | None, deletes: Sequence[int] | None
) -> bytes | None:
    """A serialised ``MutatePrioritiesRequest``, or None when a key or priority is not a
    plain number (build the message instead, which raises the usual errors).

    Table = 1, updates = 2 repeated ``KeyWithPriority{key = 1, priority = 2}``, packed
    delete_keys = 3. Every update carries both of its fields (also a zero key or
    priority), which any protobuf parser reads like the canonical encoding.

    Args:
      table: the table's name.
      updates: new priorities by key.
      deletes: keys to delete.
    """
    # Written with numpy: every field of every update at once.
    parts = [length_delimited(b"\x0a", table.encode("utf-8")) if table else b""]
    if updates:
        keys = _as_uint64(list(updates.keys()))
        if keys is None:
            return None
        try:
            priorities = np.array(list(updates.values()))
        except (OverflowError, ValueError, TypeError):
            return None
        if priorities.ndim != 1 or priorities.dtype.kind not in "fiu":
            return None
        key_bytes, widths = _varint_matrix(keys)
        count = keys.shape[0]
        # One row per update: 0x12, length, 0x08, key varint (10 slots), 0x11, double.
        rows = np.empty((count, 22), dtype=np.uint8)
        rows[:, 0] = 0x12
        rows[:, 1] = (widths + 10).astype(np.uint8)
        rows[:, 2] = 0x08
        rows[:, 3:13] = key_bytes
        rows[:, 13] = 0x11
        rows[:, 14:22] = priorities.astype("<f8").reshape(count, 1).view(np.uint8).reshape(count, 8)
        mask = np.ones((count, 22), dtype=bool)
        mask[:, 3:13] = np.arange(10) < widths[:, None]
        parts.append(rows[mask].tobytes())
    if deletes:
        delete_keys = _as_uint64(list(deletes))
        if delete_keys is None:
            return None
        key_bytes, widths = _varint_matrix(delete_keys)
        packed = key_bytes[np.arange(10) < widths[:, None]].tobytes()
        parts.append(length_delimited(b"\x1a", packed))
    return b"".join(parts)


def decode_mutate_request(data: bytes) -> tuple[str, list[int], list[float], list[int]]:
    """Reads a serialised ``MutatePrioritiesRequest``.

    Protobuf's rules apply: fields in any order, unknown fields skipped, a repeated
    table field keeps its last value, ``delete_keys`` packed or not (or both).

    Args:
      data: the request's bytes.

    Returns:
      ``(table, keys, priorities, deletes)``: the updates as two parallel lists.

    Raises:
      InvalidArgumentError: ``data`` is not a well-formed request.
    """
    if type(data) is not bytes:
        data = bytes(data)
    try:
        request = _FromString(data)
    except DecodeError:
        raise InvalidArgumentError(_MALFORMED) from None
    pairs = [(update.key, update.priority) for update in request.updates]
    return (
        request.table,
        [key for key, _ in pairs],
        [priority for _, priority in pairs],
        list(request.delete_keys),
    )


class ItemMap(dict[int, Any]):
    """A table's items by key: a ``dict`` whose keys are ints in ``[0, 2**64)``.

    It is a ``dict`` in every way (order, views, lookups). Every method that adds a key
    refuses one that is not an integer in range, as ``check_key`` refuses it, and stores
    one of a subclass of ``int`` as a plain ``int``. The compiled twin also keeps an index
    of its own, key -> value in one flat C array holding a reference to each value, which
    :func:`select_updates` reads a batch of keys from: one cache line per key, fetched a
    few keys ahead. Change it through its own methods: ``dict``'s, called unbound
    (``dict.__setitem__(m, k, v)``), bypass the index. It cannot be subclassed.
    """

    __slots__ = ()

    def __init__(self, other: Any = (), /, **kwargs: Any) -> None:
        super().__init__()
        self.update(other, **kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("type 'ItemMap' is not an acceptable base type")

    def __setitem__(self, key: Any, value: Any) -> None:
        if type(key) is not int or not 0 <= key <= KEY_MAX:  # noqa: E721 - exact int
            key = check_key(key)
        dict.__setitem__(self, key, value)

    def setdefault(self, key: Any, default: Any = None, /) -> Any:
        if key in self:
            return self[key]
        self[key] = default
        return default

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        for key, value in dict(other, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> ItemMap:  # type: ignore[override,misc]
        self.update(other)
        return self

    def copy(self) -> dict[Any, Any]:
        return dict(self)

    def __reduce__(self) -> tuple[type[ItemMap], tuple[()], None, None, Iterator[Any]]:
        return ItemMap, (), None, None, iter(self.items())


def select_updates(
    items: Mapping[int, Any],
    keys: Sequence[int],
    priorities: Sequence[Any],
    excluded: Container[int],
) -> tuple[list[int], list[float], list[Any]]:
    """The updates that apply: keys that name an item of ``items`` and are not excluded.

    Every key is looked up first; then, in order, each found key that is not in
    ``excluded`` is kept with its priority converted by ``float()`` and its item. The
    priorities of the other keys are never looked at. ``keys`` and ``priorities`` are
    read as they are when the call begins (a copy of each: code run by a key's
    ``__eq__`` or a priority's ``__float__`` cannot change what is read).

    Args:
      items: the table's items by key.
      keys: the keys to update.
      priorities: as many new priorities.
      excluded: keys to leave out (the ones being deleted); may be empty.

    Returns:
      ``(keys, priorities, items)``: three parallel lists.

    Raises:
      InvalidArgumentError: ``keys`` and ``priorities`` differ in length.
      TypeError, ValueError: a key is unhashable, or ``float()`` refuses a priority.
    """
    if len(keys) != len(priorities):
        raise InvalidArgumentError(
            f"keys and priorities must have the same length, got {len(keys)} and {len(priorities)}."
        )
    keys = list(keys)
    priorities = list(priorities)
    if len(keys) != len(priorities):  # a sequence whose len() and items disagree
        raise InvalidArgumentError(
            f"keys and priorities must have the same length, got {len(keys)} and {len(priorities)}."
        )
    found = list(map(items.get, keys))
    if not excluded and None not in found:
        return list(keys), list(map(float, priorities)), found
    kept_keys: list[int] = []
    kept_priorities: list[float] = []
    targets: list[Any] = []
    for key, priority, item in zip(keys, priorities, found):
        if item is not None and key not in excluded:
            kept_keys.append(key)
            kept_priorities.append(float(priority))
            targets.append(item)
    return kept_keys, kept_priorities, targets


def assign_priorities(targets: Sequence[Any], priorities: Sequence[float]) -> None:
    """Sets ``targets[i].priority = priorities[i]`` (up to the shorter length).

    The targets and priorities are read as they are when the call begins (code run by a
    setter cannot change what is read).
    """
    if type(targets) is list and type(priorities) is list:  # noqa: E721 - exact lists
        targets, priorities = tuple(targets), tuple(priorities)
    for item, priority in zip(targets, priorities):
        item.priority = priority
