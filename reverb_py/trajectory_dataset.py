"""Reverb's ``reverb.trajectory_dataset`` module path: ``TrajectoryDataset`` (needs TensorFlow).

Importing this module imports TensorFlow; without it the import fails with an
``ImportError`` (the TF-free datasets are in :mod:`reverb_py.data`).
"""

from reverb_py import client as reverb_client
from reverb_py import replay_sample
from reverb_py._tf_data import TrajectoryDataset

__all__ = ["TrajectoryDataset", "replay_sample", "reverb_client"]
