"""The writer engine (Reverb's native ``TrajectoryWriter``): the twin ``_impl`` selected.

The source is ``reverb_py/_pure/internal_writer.py``; compiled as it is by Cython it is
also ``reverb_py._speedups.internal_writer``. Importing this module gives the selected
one (this module replaces itself in ``sys.modules``), so every importer shares the same
classes.
"""

import sys

from reverb_py import _impl

sys.modules[__name__] = _impl.internal_writer
