"""reverb_py: experience replay for reinforcement learning, without TensorFlow.

``import reverb_py as reverb`` gives Reverb's public names;
:func:`install_as_reverb` makes ``import reverb`` itself give them, for libraries that
import Reverb by name (Acme, TF-Agents). This module only re-exports,
after setting gRPC's core settings for the process (:mod:`reverb_py._grpc_settings`:
``GRPC_VERBOSITY`` and ``GRPC_EXPERIMENTS``), which gRPC reads when it is first imported,
so before anything here imports gRPC.
"""

from reverb_py import _grpc_settings

_grpc_settings.apply()

# ruff: noqa: E402 - the imports follow the settings above.

from reverb_py import (
    aio,
    cc,
    checkpointers,
    data,
    errors,
    item_selectors,
    libpybind,
    platform,
    pybind,
    rate_limiters,
    reverb_types,
    selectors,
    server_executable,
)
from reverb_py import structured_writer as structured
from reverb_py._as_reverb import install_as_reverb
from reverb_py._impl import IMPLEMENTATION
from reverb_py.client import Client, Writer
from reverb_py.errors import DeadlineExceededError, ReverbError
from reverb_py.replay_sample import ReplaySample, SampleInfo
from reverb_py.server import Server
from reverb_py.table import Table, TableExtensionBase
from reverb_py.tensor_spec import BoundedTensorSpec, TensorSpec
from reverb_py.trajectory_writer import TrajectoryColumn, TrajectoryWriter

__version__ = "0.1.0"

# Reverb's TensorFlow names and the module of each, imported (with TensorFlow) on first use.
_TENSORFLOW_NAMES = {
    "PatternDataset": "reverb_py._tf_data",
    "TimestepDataset": "reverb_py._tf_data",
    "TrajectoryDataset": "reverb_py._tf_data",
    "TFClient": "reverb_py.tf_client",
}


def __getattr__(name: str) -> object:
    if name in _TENSORFLOW_NAMES:
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            raise ImportError(
                f"reverb_py.{name} is made of TensorFlow ops and needs TensorFlow "
                "(pip install 'reverb_py[tf]'). Without TensorFlow use "
                "reverb_py.data.TrajectoryIterator / reverb_py.data.TimestepIterator "
                "(numpy), reverb_py.torch.TrajectoryDataset / TimestepDataset (PyTorch) or "
                "reverb_py.jax.TrajectoryIterator (JAX)."
            ) from None
        import importlib

        return getattr(importlib.import_module(_TENSORFLOW_NAMES[name]), name)
    raise AttributeError(f"module 'reverb_py' has no attribute {name!r}")


__all__ = [
    "IMPLEMENTATION",
    "BoundedTensorSpec",
    "Client",
    "DeadlineExceededError",
    "ReplaySample",
    "ReverbError",
    "SampleInfo",
    "Server",
    "Table",
    "TableExtensionBase",
    "TensorSpec",
    "TrajectoryColumn",
    "TrajectoryWriter",
    "Writer",
    "aio",
    "cc",
    "checkpointers",
    "data",
    "errors",
    "install_as_reverb",
    "item_selectors",
    "libpybind",
    "platform",
    "pybind",
    "rate_limiters",
    "reverb_types",
    "selectors",
    "server_executable",
    "structured",
    "__version__",
]
