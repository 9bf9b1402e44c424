"""The dm-tree subset used by the writers: flatten, paths, unflatten, structure union."""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np
import pytest

from reverb_py._codec import nest as _nest

Point = collections.namedtuple("Point", ["y", "x"])


class Step(NamedTuple):
    observation: Any
    action: Any


def test_leaves_are_everything_but_containers() -> None:
    array = np.zeros(3)
    for leaf in (None, 1, 2.5, "text", b"bytes", array):
        assert _nest.flatten(leaf) == [leaf]
        assert _nest.flatten_with_path(leaf) == [((), leaf)]
        assert not _nest.is_nested(leaf)


def test_dict_keys_are_sorted_and_sequences_by_position() -> None:
    nest = {"b": [1, (2, 3)], "a": 0, "c": {"z": 4, "y": None}}
    assert _nest.flatten(nest) == [0, 1, 2, 3, None, 4]
    assert _nest.flatten_with_path(nest) == [
        (("a",), 0),
        (("b", 0), 1),
        (("b", 1, 0), 2),
        (("b", 1, 1), 3),
        (("c", "y"), None),
        (("c", "z"), 4),
    ]


def test_namedtuples_flatten_in_field_order_with_field_names() -> None:
    nest = Point(y=1, x=Step(observation=2, action=3))
    assert _nest.flatten(nest) == [1, 2, 3]
    assert _nest.flatten_with_path(nest) == [
        (("y",), 1),
        (("x", "observation"), 2),
        (("x", "action"), 3),
    ]
    assert _nest.is_namedtuple(nest)
    assert not _nest.is_namedtuple((1, 2))


def test_empty_containers_have_no_leaves() -> None:
    assert _nest.flatten({}) == []
    assert _nest.flatten({"a": [], "b": ()}) == []
    assert _nest.flatten_with_path([[], {}]) == []


def test_unsortable_keys_raise_type_error() -> None:
    with pytest.raises(TypeError, match="sortable"):
        _nest.flatten({1: 0, "a": 1})


def test_unflatten_as_round_trips_and_keeps_container_types() -> None:
    ordered = collections.OrderedDict([("b", 1), ("a", 2)])
    nest = {"z": ordered, "p": Point(y=[3, 4], x=(5,)), "n": None}
    flat = _nest.flatten(nest)
    rebuilt = _nest.unflatten_as(nest, flat)
    assert rebuilt == nest
    assert type(rebuilt["z"]) is collections.OrderedDict
    assert list(rebuilt["z"]) == ["b", "a"]  # the template's own key order
    assert type(rebuilt["p"]) is Point
    assert isinstance(rebuilt["p"].y, list) and isinstance(rebuilt["p"].x, tuple)
    assert _nest.unflatten_as({"b": 0, "a": 0}, ["A", "B"]) == {"a": "A", "b": "B"}


def test_unflatten_as_of_a_leaf_and_count_errors() -> None:
    assert _nest.unflatten_as(None, [7]) == 7
    with pytest.raises(ValueError, match="2 items into a structure with 1 leaves"):
        _nest.unflatten_as({"a": 0}, [1, 2])


def test_defaultdict_is_rebuilt_as_a_plain_dict() -> None:
    nest = collections.defaultdict(list, {"a": 1})
    assert _nest.unflatten_as(nest, [2]) == {"a": 2}


def test_map_structure() -> None:
    assert _nest.map_structure(lambda x: x * 2, {"a": [1, 2], "b": Point(3, 4)}) == {
        "a": [2, 4],
        "b": Point(6, 8),
    }
    assert _nest.map_structure(lambda _: None, 5) is None


def test_merge_dicts_by_key_and_sequences_by_position() -> None:
    first = {"a": None, "b": [None]}
    second = {"c": None, "b": [None, None, {"x": None}]}
    merged = _nest.merge_structures(first, second)
    assert merged == {"a": None, "b": [None, None, {"x": None}], "c": None}
    assert _nest.merge_structures((None, None, None), (None,)) == (None, None, None)
    assert _nest.merge_structures([None], (None, None)) == [None, None]


def test_merge_namedtuples_by_field() -> None:
    merged = _nest.merge_structures(
        Step(observation={"a": None}, action=None), Step(observation={"b": None}, action=None)
    )
    assert merged == Step(observation={"a": None, "b": None}, action=None)


def test_merge_with_empty_containers() -> None:
    assert _nest.merge_structures({}, {"a": None}) == {"a": None}
    assert _nest.merge_structures({"a": {"x": None}}, {"a": {}}) == {"a": {"x": None}}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"a": None}, {"a": {"x": None}}),
        ({"a": [None]}, {"a": {"x": None}}),
        (Point(None, None), Step(None, None)),
        (Point(None, None), (None, None)),
    ],
)
def test_merge_conflicts_raise_value_error(first: Any, second: Any) -> None:
    with pytest.raises(ValueError, match="incompatible"):
        _nest.merge_structures(first, second)
