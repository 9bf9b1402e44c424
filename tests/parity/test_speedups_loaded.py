"""The implementation that is live is the one the run asked for."""

from __future__ import annotations

import os
import sys

import pytest

from reverb_py import _impl


def test_compiled_structures_are_live_when_required() -> None:
    if not os.environ.get("REVERB_PY_REQUIRE_SPEEDUPS"):
        pytest.skip("this run does not require the compiled structures")
    assert _impl.IMPLEMENTATION == "cython"
    for cls in (_impl.SumTree, _impl.IndexedHeap, _impl.OrderedKeys, _impl.IndexedSet,
                _impl.RateLimiterState):
        assert cls.__module__.startswith("reverb_py._speedups."), cls
        module_file = sys.modules[cls.__module__].__file__ or ""
        assert module_file.endswith((".so", ".pyd")), module_file


def test_kill_switch_gives_pure_structures() -> None:
    if not os.environ.get("REVERB_PY_NO_EXTENSIONS"):
        pytest.skip("this run does not set REVERB_PY_NO_EXTENSIONS")
    assert _impl.IMPLEMENTATION == "python"
    for cls in (_impl.SumTree, _impl.IndexedHeap, _impl.OrderedKeys, _impl.IndexedSet,
                _impl.RateLimiterState):
        assert cls.__module__.startswith("reverb_py._pure."), cls


def test_implementation_is_all_or_nothing() -> None:
    modules = {cls.__module__.split(".")[1] for cls in (
        _impl.SumTree, _impl.IndexedHeap, _impl.OrderedKeys, _impl.IndexedSet,
        _impl.RateLimiterState)}
    assert len(modules) == 1
    assert _impl.IMPLEMENTATION == {"_speedups": "cython", "_pure": "python"}[modules.pop()]


def test_top_level_reports_the_implementation() -> None:
    import reverb_py

    assert reverb_py.IMPLEMENTATION == _impl.IMPLEMENTATION
