"""reverb_py: experience replay for reinforcement learning, without TensorFlow.

``import reverb_py as reverb`` gives Reverb's public names. This module only re-exports.
"""

from reverb_py import errors, item_selectors, rate_limiters, reverb_types
from reverb_py import selectors
from reverb_py._impl import IMPLEMENTATION
from reverb_py.errors import DeadlineExceededError, ReverbError
from reverb_py.table import Table, TableExtensionBase
from reverb_py.tensor_spec import BoundedTensorSpec, TensorSpec

__all__ = [
    "IMPLEMENTATION",
    "BoundedTensorSpec",
    "DeadlineExceededError",
    "ReverbError",
    "Table",
    "TableExtensionBase",
    "TensorSpec",
    "errors",
    "item_selectors",
    "rate_limiters",
    "reverb_types",
    "selectors",
]
