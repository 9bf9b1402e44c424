"""``TrajectoryWriter``, ``AsyncTrajectoryWriter`` and ``TrajectoryColumn``: the twin
``_impl`` selected.

The source is ``reverb_py/_pure/trajectory_writer.py``; compiled as it is by Cython it is
also ``reverb_py._speedups.trajectory_writer``. Importing this module gives the selected
one (this module replaces itself in ``sys.modules``), so every importer shares the same
classes.
"""

import sys

from reverb_py import _impl

sys.modules[__name__] = _impl.trajectory_writer
