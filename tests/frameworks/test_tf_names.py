"""With TensorFlow installed, Reverb's TensorFlow names resolve under reverb_py."""

from __future__ import annotations

import importlib
import inspect
import json
import pathlib
import types

import pytest

LISTING = pathlib.Path(__file__).parents[1] / "unit" / "data" / "dm_reverb_0_14_names.json"
TF_MODULES = (
    "reverb.pattern_dataset",
    "reverb.tf_client",
    "reverb.timestep_dataset",
    "reverb.trajectory_dataset",
)
TF_NAMES = ("PatternDataset", "TFClient", "TimestepDataset", "TrajectoryDataset")


def _ours(name: str) -> str:
    return "reverb_py" + name[len("reverb") :]


def test_top_level_tensorflow_names_are_classes() -> None:
    import tensorflow as tf

    import reverb_py

    for name in TF_NAMES:
        assert inspect.isclass(getattr(reverb_py, name)), name
    assert issubclass(reverb_py.TrajectoryDataset, tf.data.Dataset)
    assert issubclass(reverb_py.TimestepDataset, tf.data.Dataset)


@pytest.mark.parametrize("module", TF_MODULES)
def test_tensorflow_modules_hold_reverbs_names(module: str) -> None:
    listing = json.loads(LISTING.read_text(encoding="utf-8"))
    imported = importlib.import_module(_ours(module))
    for attribute, kind in listing[module].items():
        value = getattr(imported, attribute, None)
        assert value is not None, f"{_ours(module)}.{attribute} does not exist"
        if kind == "class":
            assert inspect.isclass(value), attribute
        elif kind.startswith("module "):
            assert isinstance(value, types.ModuleType), attribute
