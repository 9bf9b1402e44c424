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
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from reverb_py import _codec
from reverb_py._proto import reverb_service_pb2
from reverb_py.errors import InvalidArgumentError

__all__ = [
    "assign_priorities",
    "decode_mutate_request",
    "encode_mutate_request",
    "select_updates",
]

_MALFORMED = (
    "Malformed MutatePrioritiesRequest: corrupt wire format or a table name that is "
    "not UTF-8."
)

_FromString = reverb_service_pb2.MutatePrioritiesRequest.FromString


def encode_mutate_request(
    table: str, updates: Mapping[int, float] | None, deletes: Sequence[int] | None
) -> bytes | None:
    """A serialised ``MutatePrioritiesRequest``, or None when a key or priority is not a
    plain number (build the message instead, which raises the usual errors).

    The bytes, and when None is returned, are those of ``_codec.encode_mutate_request``:
    every update carries both of its fields and ``delete_keys`` is packed.

    Args:
      table: the table's name.
      updates: new priorities by key.
      deletes: keys to delete.
    """
    return _codec.encode_mutate_request(table, updates, deletes)


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


def select_updates(
    items: Mapping[int, Any],
    keys: Sequence[int],
    priorities: Sequence[Any],
    excluded: Container[int],
) -> tuple[list[int], list[float], list[Any]]:
    """The updates that apply: keys that name an item of ``items`` and are not excluded.

    Every key is looked up first; then, in order, each found key that is not in
    ``excluded`` is kept with its priority converted by ``float()`` and its item. The
    priorities of the other keys are never looked at.

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
            "keys and priorities must have the same length, "
            f"got {len(keys)} and {len(priorities)}."
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
    """Sets ``targets[i].priority = priorities[i]`` (up to the shorter length)."""
    for item, priority in zip(targets, priorities):
        item.priority = priority
