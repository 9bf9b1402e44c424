"""Without a framework, its adapter module says which extra to install."""

from __future__ import annotations

import importlib
import importlib.util
import re

import pytest

ADAPTERS = [
    ("reverb_py.torch", "torch", "reverb_py[torch]"),
    ("reverb_py.jax", "jax", "reverb_py[jax]"),
    ("reverb_py.tf_client", "tensorflow", "reverb_py[tf]"),
    ("reverb_py._tf_data", "tensorflow", "reverb_py[tf]"),
]


@pytest.mark.parametrize(("module", "framework", "extra"), ADAPTERS)
def test_an_adapter_without_its_framework_names_the_extra(
    module: str, framework: str, extra: str
) -> None:
    if importlib.util.find_spec(framework) is not None:
        pytest.skip(f"{framework} is installed")
    with pytest.raises(ImportError, match=rf"needs? .*pip install '{re.escape(extra)}'"):
        importlib.import_module(module)


def test_the_tensorflow_names_without_tensorflow_point_elsewhere() -> None:
    if importlib.util.find_spec("tensorflow") is not None:
        pytest.skip("tensorflow is installed")
    import reverb_py

    for name in ("TrajectoryDataset", "TimestepDataset", "TFClient"):
        with pytest.raises(ImportError, match=r"reverb_py\.data\.TrajectoryIterator"):
            getattr(reverb_py, name)
    with pytest.raises(AttributeError):
        reverb_py.NoSuchName  # noqa: B018
