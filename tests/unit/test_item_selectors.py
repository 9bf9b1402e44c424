"""Public selector objects: options, repr, rebuilding from options."""

from __future__ import annotations

import pytest

from reverb_py import errors, item_selectors, selectors
from reverb_py._proto import schema_pb2

ALL = [
    selectors.Uniform(),
    selectors.Prioritized(0.6),
    selectors.Fifo(),
    selectors.Lifo(),
    selectors.MinHeap(),
    selectors.MaxHeap(),
]


def test_selectors_module_is_item_selectors() -> None:
    assert selectors.Uniform is item_selectors.Uniform
    assert selectors.MinHeap is item_selectors.MinHeap


def test_heaps_are_one_class_as_in_reverb() -> None:
    assert type(selectors.MinHeap()) is type(selectors.MaxHeap()) is selectors.HeapSelector
    assert selectors.MinHeap().min_heap and not selectors.MaxHeap().min_heap


@pytest.mark.parametrize(
    "selector, field, deterministic",
    [
        (selectors.Uniform(), "uniform", False),
        (selectors.Prioritized(0.6), "prioritized", False),
        (selectors.Fifo(), "fifo", True),
        (selectors.Lifo(), "lifo", True),
        (selectors.MinHeap(), "heap", True),
        (selectors.MaxHeap(), "heap", True),
    ],
)
def test_options_shape(selector, field, deterministic) -> None:
    options = selector.options()
    assert isinstance(options, schema_pb2.KeyDistributionOptions)
    assert options.WhichOneof("distribution") == field
    assert options.is_deterministic is deterministic
    assert selector.is_deterministic is deterministic


def test_options_values() -> None:
    assert selectors.Prioritized(0.6).options().prioritized.priority_exponent == 0.6
    assert selectors.MinHeap().options().heap.min_heap is True
    assert selectors.MaxHeap().options().heap.min_heap is False
    # Wire bytes: fifo=1 (varint true) then is_deterministic=7 true.
    assert selectors.Fifo().options().SerializeToString() == b"\x08\x01\x38\x01"


@pytest.mark.parametrize("selector", ALL, ids=repr)
def test_round_trip_through_options(selector) -> None:
    rebuilt = selectors.selector_from_options(selector.options())
    assert rebuilt == selector and type(rebuilt) is type(selector)
    assert selectors.selector_from_options(selector.options().SerializeToString()) == selector


def test_unknown_options_are_refused() -> None:
    with pytest.raises(errors.InvalidArgumentError):
        selectors.selector_from_options(schema_pb2.KeyDistributionOptions())


def test_reprs() -> None:
    assert [repr(s) for s in ALL] == [
        "Uniform()",
        "Prioritized(priority_exponent=0.6)",
        "Fifo()",
        "Lifo()",
        "MinHeap()",
        "MaxHeap()",
    ]


def test_each_selector_builds_an_empty_structure_that_can_sample_and_remove() -> None:
    for selector in ALL:
        structure = selector.new_structure()
        assert len(structure) == 0
        structure.insert(1, 1.0)
        structure.insert(2, 2.0)
        key, probability = structure.sample(0.0)
        assert key in (1, 2) and 0.0 < probability <= 1.0
        structure.delete(key)
        assert len(structure) == 1


def test_a_selector_object_configures_many_tables() -> None:
    from reverb_py import rate_limiters
    from reverb_py.table import Table

    sampler = selectors.Uniform()
    a = Table("a", sampler, selectors.Fifo(), 10, rate_limiters.MinSize(1))
    b = Table("b", sampler, selectors.Fifo(), 10, rate_limiters.MinSize(1))
    assert a.info.sampler_options == b.info.sampler_options
