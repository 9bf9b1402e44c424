"""Key and priority checks shared by the pure-Python structures.

The compiled structures share the same checks from ``_speedups/_common.pxd``: both raise
the same exception types with the same messages.

The hot single-key methods keep the fast path inline, as ``if type(key) is not int or
key < 0 or key > KEY_MAX: key = check_key(key)``, and call :func:`check_key` only for the
rare key that needs converting or is refused.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Container, Iterator, Sequence
from typing import TypeVar

from reverb_py.errors import InvalidArgumentError, NotFoundError

__all__ = [
    "CRC",
    "FOOTER_SIZE",
    "FRAMING_SIZE",
    "HEADER",
    "HEADER_SIZE",
    "KEY_MAX",
    "LENGTH",
    "MASK_DELTA",
    "check_key",
    "check_priority",
    "check_same_length",
    "checked_entries",
    "check_entries",
    "contains_key",
    "to_float",
]

KEY_MAX = 2**64 - 1

# TFRecord's framing, the one definition: the checkpoint_records twins and
# reverb_py._storage read and write with these (the compiled twin keeps C copies of the
# sizes, and crc32c.h of the mask).
MASK_DELTA = 0xA282EAD8
LENGTH = struct.Struct("<Q")
CRC = struct.Struct("<I")
HEADER = struct.Struct("<QI")
HEADER_SIZE = HEADER.size  # 12: the length and its CRC
FOOTER_SIZE = CRC.size  # 4: the payload's CRC
FRAMING_SIZE = HEADER_SIZE + FOOTER_SIZE  # 16 bytes of framing per record

_T = TypeVar("_T")


def check_key(key: object) -> int:
    """Returns ``key`` as an exact ``int`` in ``[0, 2**64)``.

    Raises:
      TypeError: ``key`` is not an integer.
      InvalidArgumentError: ``key`` is out of range.
    """
    if type(key) is not int:
        if not isinstance(key, int):
            raise TypeError(f"Key must be an integer, got {type(key).__name__}.")
        key = operator.index(key)
    if key < 0 or key > KEY_MAX:
        raise InvalidArgumentError(f"Key must be an integer in [0, 2**64), got {key!r}.")
    return key


def contains_key(present: Container[int], key: object) -> bool:
    """``key in present`` for a structure's ``__contains__``; ``False`` for a non-integer."""
    if type(key) is not int:
        if not isinstance(key, int):
            return False
        key = operator.index(key)
    return key in present


def to_float(value: object, what: str) -> float:
    """Converts ``value`` with ``float()``, refusing strings.

    Raises:
      TypeError: ``value`` is not a number.
    """
    if type(value) is float:
        return value
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}.")
    return float(value)  # type: ignore[arg-type]


def check_priority(key: int, priority: object) -> float:
    """Returns ``priority`` as a float that is not NaN.

    Raises:
      TypeError: ``priority`` is not a number.
      InvalidArgumentError: ``priority`` is NaN.
    """
    value = priority if type(priority) is float else to_float(priority, "Priority")
    if value != value:
        raise InvalidArgumentError(f"Priority must not be NaN (key={key}, priority={value!r}).")
    return value


def check_same_length(keys: Sequence[int], priorities: Sequence[float]) -> None:
    """The first check of ``update_many``.

    Raises:
      InvalidArgumentError: ``keys`` and ``priorities`` differ in length.
    """
    if len(keys) != len(priorities):
        raise InvalidArgumentError(
            f"keys and priorities must have the same length, got {len(keys)} and {len(priorities)}."
        )


def checked_entries(
    keys: Sequence[int],
    priorities: Sequence[float],
    convert: Callable[[int, object], _T],
    present: Container[int],
) -> Iterator[tuple[int, _T]]:
    """The validation pass of ``update_many``: yields ``(key, convert(key, priority))``.

    The lengths are compared first (:func:`check_same_length`); then each entry is
    checked in turn, key first, then its priority (with ``convert``), then the key's
    presence, and yielded before the next is looked at.

    Raises:
      InvalidArgumentError: the lengths differ, or a key is out of range, or ``convert``
        refuses a priority.
      TypeError: a key is not an integer or a priority is not a number.
      NotFoundError: a key is not in ``present``.
    """
    check_same_length(keys, priorities)
    for key, priority in zip(keys, priorities):
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        value = convert(key, priority)
        if key not in present:
            raise NotFoundError(f"Key {key} not found.")
        yield key, value


def check_entries(
    keys: Sequence[int], priorities: Sequence[float], present: Container[int]
) -> None:
    """``update_many`` of a structure that ignores priorities: checks every entry.

    The checks, and their order, are those of :func:`checked_entries`; a priority only
    has to be a number (it is converted with :func:`to_float`, then ignored).
    """
    check_same_length(keys, priorities)
    for key, priority in zip(keys, priorities):
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if type(priority) is not float:
            to_float(priority, "Priority")
        if key not in present:
            raise NotFoundError(f"Key {key} not found.")
