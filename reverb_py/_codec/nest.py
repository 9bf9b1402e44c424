"""Small nest helpers (the parts of ``dm-tree`` the writers need).

A *nest* is a leaf or a container of nests. Containers are mappings (``dict`` and other
``collections.abc.Mapping``), lists, tuples and namedtuples; everything else — including
``None``, strings, bytes and numpy arrays — is a leaf, as in ``dm-tree``.

Order and paths follow ``tree.flatten_with_path``: mapping keys sorted, lists and tuples
by position (path element = the ``int`` index), namedtuples in field order (path element
= the field name). A path is the tuple of path elements from the root to a leaf; the
root leaf has the path ``()``. Empty containers have no leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "flatten",
    "flatten_with_path",
    "is_namedtuple",
    "is_nested",
    "map_structure",
    "merge_structures",
    "unflatten_as",
]

Path = tuple[Any, ...]


def is_namedtuple(value: object) -> bool:
    """Whether ``value`` is a namedtuple instance (a tuple with ``str`` ``_fields``)."""
    fields = getattr(type(value), "_fields", None)
    return (
        isinstance(value, tuple)
        and isinstance(fields, tuple)
        and all(isinstance(field, str) for field in fields)
    )


def is_nested(value: object) -> bool:
    """Whether ``value`` is a container (mapping, list or tuple) rather than a leaf."""
    return isinstance(value, (Mapping, list, tuple))


def _sorted_keys(mapping: Mapping[Any, Any]) -> list[Any]:
    try:
        return sorted(mapping)
    except TypeError:
        # NOTE(nest): dm-tree also refuses unorderable keys; say which ones.
        raise TypeError(
            f"Mapping keys must be sortable to flatten a nest, got keys {list(mapping)!r}"
        ) from None


def _children(value: Any) -> Iterator[tuple[Any, Any]]:
    """(path element, child) pairs of a container, in flattening order."""
    if isinstance(value, Mapping):
        for key in _sorted_keys(value):
            yield key, value[key]
    elif is_namedtuple(value):
        for field in type(value)._fields:
            yield field, getattr(value, field)
    else:
        yield from enumerate(value)


def _flatten_with_path_into(value: Any, path: Path, out: list[tuple[Path, Any]]) -> None:
    if not is_nested(value):
        out.append((path, value))
        return
    for element, child in _children(value):
        _flatten_with_path_into(child, (*path, element), out)


def flatten_with_path(structure: Any) -> list[tuple[Path, Any]]:
    """Returns ``(path, leaf)`` pairs in flattening order.

    Examples:
      ``flatten_with_path({'b': [1, None], 'a': 2})`` is
      ``[(('a',), 2), (('b', 0), 1), (('b', 1), None)]``.
    """
    out: list[tuple[Path, Any]] = []
    _flatten_with_path_into(structure, (), out)
    return out


def _flatten_into(value: Any, out: list[Any]) -> None:
    if not is_nested(value):
        out.append(value)
        return
    for _, child in _children(value):
        _flatten_into(child, out)


def flatten(structure: Any) -> list[Any]:
    """Returns the leaves of ``structure`` in flattening order."""
    out: list[Any] = []
    _flatten_into(structure, out)
    return out


def _rebuild(template: Any, children: dict[Any, Any]) -> Any:
    """A container like ``template`` whose child at each path element is ``children[e]``."""
    if isinstance(template, Mapping):
        # Keep the template's own key order (dm-tree does the same).
        items = [(key, children[key]) for key in template]
        factory: Any = type(template)
        try:
            return factory(items)
        except TypeError:
            return dict(items)
    if is_namedtuple(template):
        return type(template)(*(children[field] for field in type(template)._fields))
    values = [children[index] for index in range(len(template))]
    if isinstance(template, list):
        return values
    return type(template)(values) if type(template) is not tuple else tuple(values)


def _unflatten(template: Any, leaves: Iterator[Any]) -> Any:
    if not is_nested(template):
        return next(leaves)
    children = {element: _unflatten(child, leaves) for element, child in _children(template)}
    return _rebuild(template, children)


def unflatten_as(structure: Any, flat: Sequence[Any]) -> Any:
    """Builds a nest shaped like ``structure`` whose leaves are ``flat`` (in flattening order).

    Raises:
      ValueError: ``flat`` does not have exactly as many items as ``structure`` has leaves.
    """
    expected = len(flatten(structure))
    if len(flat) != expected:
        raise ValueError(
            f"Could not pack a sequence of {len(flat)} items into a structure with "
            f"{expected} leaves."
        )
    return _unflatten(structure, iter(flat))


def map_structure(fn: Callable[[Any], Any], structure: Any) -> Any:
    """Applies ``fn`` to every leaf and returns a nest of the same shape."""
    return unflatten_as(structure, [fn(leaf) for leaf in flatten(structure)])


def _is_empty_container(value: Any) -> bool:
    return is_nested(value) and len(value) == 0


def merge_structures(first: Any, second: Any) -> Any:
    """Returns the union of two structures whose leaves are all ``None``.

    Mappings merge by key (keys of ``first`` first, then new keys of ``second``), lists
    and tuples by position (the longer one's tail is kept; the container type of
    ``first`` wins), namedtuples of the same class by field. An empty container merges
    with anything. The result's leaves are ``None``.

    Raises:
      ValueError: the structures disagree at some path (a leaf against a non-empty
        container, a mapping against a sequence, namedtuples of different classes).
    """
    return _merge(first, second, ())


def _conflict(first: Any, second: Any, path: Path) -> ValueError:
    return ValueError(
        f"The structure of the appended data is incompatible with the structure of the "
        f"previously appended data at path {path}: {type(first).__name__} vs "
        f"{type(second).__name__}."
    )


def _merge(first: Any, second: Any, path: Path) -> Any:
    if _is_empty_container(first) and is_nested(second):
        return map_structure(lambda _: None, second)
    if _is_empty_container(second) and is_nested(first):
        return map_structure(lambda _: None, first)
    first_nested, second_nested = is_nested(first), is_nested(second)
    if not first_nested and not second_nested:
        return None
    if first_nested != second_nested:
        raise _conflict(first, second, path)
    if isinstance(first, Mapping) or isinstance(second, Mapping):
        if not (isinstance(first, Mapping) and isinstance(second, Mapping)):
            raise _conflict(first, second, path)
        merged: dict[Any, Any] = {}
        for key in first:
            if key in second:
                merged[key] = _merge(first[key], second[key], (*path, key))
            else:
                merged[key] = map_structure(lambda _: None, first[key])
        for key in second:
            if key not in first:
                merged[key] = map_structure(lambda _: None, second[key])
        return merged
    if is_namedtuple(first) or is_namedtuple(second):
        if type(first) is not type(second):
            raise _conflict(first, second, path)
        return type(first)(
            *(
                _merge(getattr(first, field), getattr(second, field), (*path, field))
                for field in type(first)._fields
            )
        )
    common = min(len(first), len(second))
    values = [_merge(first[i], second[i], (*path, i)) for i in range(common)]
    longer = first if len(first) >= len(second) else second
    values.extend(map_structure(lambda _: None, item) for item in longer[common:])
    if isinstance(first, list):
        return values
    return tuple(values)
