"""reverb_py: experience replay for reinforcement learning, without TensorFlow.

``import reverb_py as reverb`` gives Reverb's public names. This module only re-exports.
"""

from reverb_py import (
    aio,
    checkpointers,
    data,
    errors,
    item_selectors,
    rate_limiters,
    reverb_types,
    selectors,
)
from reverb_py._impl import IMPLEMENTATION
from reverb_py.client import Client, Writer
from reverb_py.errors import DeadlineExceededError, ReverbError
from reverb_py.replay_sample import ReplaySample, SampleInfo
from reverb_py.server import Server
from reverb_py.table import Table, TableExtensionBase
from reverb_py.tensor_spec import BoundedTensorSpec, TensorSpec
from reverb_py.trajectory_writer import TrajectoryColumn, TrajectoryWriter

__version__ = "0.1.0"

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
    "checkpointers",
    "data",
    "errors",
    "item_selectors",
    "rate_limiters",
    "reverb_types",
    "selectors",
    "__version__",
]
