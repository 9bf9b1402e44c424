"""Reverb's ``reverb.pattern_dataset`` module path: ``PatternDataset`` and
``pattern_dataset_with_info`` (need TensorFlow).

Importing this module imports TensorFlow; without it the import fails with an
``ImportError``.
"""

from reverb_py import replay_sample, structured_writer
from reverb_py._tf_data import PatternDataset, pattern_dataset_with_info
from reverb_py.cc import patterns_pb2

__all__ = [
    "PatternDataset",
    "pattern_dataset_with_info",
    "patterns_pb2",
    "replay_sample",
    "structured_writer",
]
