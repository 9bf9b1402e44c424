"""``TrajectoryWriter``, ``AsyncTrajectoryWriter`` and ``TrajectoryColumn``.

Their source is :mod:`reverb_py._writer.trajectory_writer`; compiled as it is by Cython
it is also ``reverb_py._speedups.trajectory_writer`` (see ``setup.py``). The live one
follows :data:`reverb_py._impl.IMPLEMENTATION`, as the engine's does
(:mod:`reverb_py._writer.engine`). Whichever is live, its classes are named as classes
of this module (``__module__``), the path they are imported and pickled by.
"""

from typing import TYPE_CHECKING

from reverb_py import _impl

if TYPE_CHECKING or _impl.IMPLEMENTATION == "python":
    from reverb_py._writer.trajectory_writer import (
        AsyncTrajectoryWriter,
        TrajectoryColumn,
        TrajectoryWriter,
        _ColumnHistory,
    )
else:
    from reverb_py._speedups.trajectory_writer import (
        AsyncTrajectoryWriter,
        TrajectoryColumn,
        TrajectoryWriter,
        _ColumnHistory,
    )

__all__ = ["AsyncTrajectoryWriter", "TrajectoryColumn", "TrajectoryWriter"]

for _public in (AsyncTrajectoryWriter, TrajectoryColumn, TrajectoryWriter, _ColumnHistory):
    _public.__module__ = __name__
del _public
