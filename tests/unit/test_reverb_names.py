"""Every public module and name of dm-reverb 0.14 resolves under ``reverb_py``.

The listing (``data/dm_reverb_0_14_names.json``) is made from the real package by
``tests/interop/list_dm_reverb_names.py``; the interop suite regenerates it and compares.
Each ``reverb.x.y`` must import or resolve as ``reverb_py.x.y`` with the same kind
(module, class, function, value), unless docs/compatibility.md lists it as not provided
(with the reason), or it is pending below.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import pathlib
import re
import types
import typing
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LISTING = pathlib.Path(__file__).parent / "data" / "dm_reverb_0_14_names.json"
COMPATIBILITY = ROOT / "docs" / "compatibility.md"

# Reverb names being built elsewhere: each list empties as its work lands (a name listed
# here that resolves fails the test, so that it is then checked like the others).
PENDING_DATASETS: set[str] = set()
PENDING = PENDING_DATASETS

# Reverb names made of TensorFlow: without TensorFlow, reaching them must fail with an
# ImportError that says so (tests/frameworks/test_tf_names.py resolves them with it).
NEEDS_TENSORFLOW = {
    "reverb.PatternDataset",
    "reverb.TFClient",
    "reverb.TimestepDataset",
    "reverb.TrajectoryDataset",
    "reverb.pattern_dataset",
    "reverb.tf_client",
    "reverb.timestep_dataset",
    "reverb.trajectory_dataset",
}


def _tensorflow_importable() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def _needs_missing_tensorflow(name: str) -> bool:
    """``name`` is made of TensorFlow, which is not installed: checks that reaching it
    raises an ImportError naming TensorFlow."""
    parts = name.split(".")
    prefixes = {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
    if not prefixes & NEEDS_TENSORFLOW or _tensorflow_importable():
        return False
    module, _, attribute = name.rpartition(".")
    with pytest.raises(ImportError, match="TensorFlow"):
        if name in MODULES or module not in MODULES:
            importlib.import_module(_ours(name))
        else:
            getattr(importlib.import_module(_ours(module)), attribute)
    return True


def _listing() -> dict[str, dict[str, str]]:
    listing: dict[str, dict[str, str]] = json.loads(LISTING.read_text(encoding="utf-8"))
    return listing


def _not_provided() -> set[str]:
    """The Reverb names docs/compatibility.md's "Reverb's module paths" table lists."""
    text = COMPATIBILITY.read_text(encoding="utf-8")
    section = text.split("## Reverb's module paths", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `reverb"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`(reverb(?:\.\w+)*)`", first_cell))
    return names


NOT_PROVIDED = _not_provided()


def _ours(name: str) -> str:
    return "reverb_py" + name[len("reverb") :]


def _excused(name: str) -> bool:
    """Pending or not provided: the name, or a module it is in."""
    parts = name.split(".")
    prefixes = {".".join(parts[:end]) for end in range(1, len(parts) + 1)}
    return bool(prefixes & (PENDING | NOT_PROVIDED))


def _import(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(_ours(name))
    except ModuleNotFoundError:
        return None


def _resolve(module: str, attribute: str) -> Any:
    imported = _import(module)
    return getattr(imported, attribute, None) if imported is not None else None


def _has_kind(value: Any, kind: str) -> bool:
    if kind.startswith("module "):
        return isinstance(value, types.ModuleType)
    if kind == "class":
        # A class, or a typing alias standing for one (ChunkerOptions is a Union).
        return inspect.isclass(value) or typing.get_origin(value) is not None
    if kind == "function":
        return callable(value)
    return value is not None


MODULES = sorted(_listing())
NAMES = sorted(
    (module, attribute, kind)
    for module, names in _listing().items()
    for attribute, kind in names.items()
)


def test_the_listing_is_dm_reverbs() -> None:
    assert "reverb" in MODULES and "reverb.pybind" in MODULES and len(NAMES) > 200


@pytest.mark.parametrize("module", MODULES)
def test_module_imports(module: str) -> None:
    if _excused(module) or _needs_missing_tensorflow(module):
        return
    assert _import(module) is not None, f"{_ours(module)} does not exist"


@pytest.mark.parametrize(("module", "attribute", "kind"), NAMES)
def test_name_resolves(module: str, attribute: str, kind: str) -> None:
    name = f"{module}.{attribute}"
    if _excused(name) or _needs_missing_tensorflow(name):
        return
    if kind.startswith("module ") and module != "reverb":
        # A module Reverb imported into another: reachable by its own path.
        target = kind.split(" ", 1)[1]
        if not _excused(target):
            assert _import(target) is not None, f"{name}: {_ours(target)} does not exist"
        return
    value = _resolve(module, attribute)
    assert value is not None, f"{_ours(name)} does not exist"
    assert _has_kind(value, kind), f"{_ours(name)} is {value!r}, Reverb's is a {kind}"


def test_pending_names_are_still_pending() -> None:
    """Names marked pending that now resolve: remove them from PENDING_*."""
    landed = set()
    for name in PENDING:
        module, _, attribute = name.rpartition(".")
        if name in MODULES and _import(name) is not None:
            landed.add(name)
        elif module and _resolve(module, attribute) is not None:
            landed.add(name)
    assert not landed, f"now provided, remove from the PENDING_* lists: {sorted(landed)}"


def test_documented_gaps_are_real() -> None:
    """Every name docs/compatibility.md lists as not provided is Reverb's and is absent."""
    known = set(MODULES) | {f"{module}.{name}" for module, name, _ in NAMES}
    assert NOT_PROVIDED, "the compatibility table was not found"
    assert NOT_PROVIDED <= known, sorted(NOT_PROVIDED - known)
    for name in NOT_PROVIDED:
        module, _, attribute = name.rpartition(".")
        present = _import(name) is not None or _resolve(module, attribute) is not None
        assert not present, f"{name} is provided now: remove it from docs/compatibility.md"


def test_native_names_map_onto_reverb_py_objects() -> None:
    import reverb_py
    from reverb_py import checkpointers, item_selectors, pybind, replay_sample

    assert pybind.HeapSelector(True).options().heap.min_heap
    assert isinstance(item_selectors.MinHeap(), pybind.HeapSelector)
    assert pybind.FifoSelector is item_selectors.Fifo
    assert pybind.Checkpointer is checkpointers.CheckpointerBase
    assert pybind.Sampler.NUM_INFO_TENSORS == len(replay_sample.SampleInfo._fields) == 5
    assert pybind.Server is reverb_py.Server and pybind.Client is reverb_py.Client
    assert pybind.TrajectoryWriter is reverb_py.TrajectoryWriter
    options = pybind.ConstantChunkerOptions(max_chunk_length=2, num_keep_alive_refs=3)
    assert options.max_chunk_length == 2
    assert pybind.AutoTunedChunkerOptions(num_keep_alive_refs=4, throughput_weight=1.0)
    selector = pybind.selector_from_proto(
        item_selectors.Prioritized(0.5).options().SerializeToString()
    )
    assert isinstance(selector, pybind.PrioritizedSelector)
    assert reverb_py.libpybind.HeapSelector is pybind.HeapSelector
    assert reverb_py.server.TableExtensionBase is reverb_py.TableExtensionBase
    assert reverb_py.reverb_types.Heap is item_selectors.HeapSelector
    from reverb_py.platform import checkpointers_lib

    assert checkpointers_lib.DefaultCheckpointer is checkpointers.DefaultCheckpointer
    assert reverb_py.client.Writer is reverb_py.Writer
