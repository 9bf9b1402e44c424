"""The writer engine this process runs (Reverb's native ``TrajectoryWriter``).

The engine's source is :mod:`reverb_py._writer.internal_writer`; compiled as it is by
Cython it is also ``reverb_py._speedups.internal_writer`` (see ``setup.py``). The live
one follows :data:`reverb_py._impl.IMPLEMENTATION`, so the engine is compiled exactly
when the rest of the hot code is. Import the engine's names from here, so that every
importer shares the same classes; :data:`module` is the live module itself.
"""

from typing import TYPE_CHECKING

from reverb_py import _impl

if TYPE_CHECKING or _impl.IMPLEMENTATION == "python":
    from reverb_py._writer import internal_writer as module
    from reverb_py._writer.internal_writer import (
        CLOSED_MESSAGE,
        DEFAULT_MAX_BATCH_BYTES,
        MAX_CHUNKER_VALUE,
        AsyncWriterTransport,
        AutoTunedChunkerOptions,
        CellRef,
        ChunkerOptions,
        ConstantChunkerOptions,
        InternalTrajectoryWriter,
        OutgoingBatch,
        WriterTransport,
        format_shape,
        new_key,
    )
else:
    from reverb_py._speedups import internal_writer as module
    from reverb_py._speedups.internal_writer import (
        CLOSED_MESSAGE,
        DEFAULT_MAX_BATCH_BYTES,
        MAX_CHUNKER_VALUE,
        AsyncWriterTransport,
        AutoTunedChunkerOptions,
        CellRef,
        ChunkerOptions,
        ConstantChunkerOptions,
        InternalTrajectoryWriter,
        OutgoingBatch,
        WriterTransport,
        format_shape,
        new_key,
    )

__all__ = [
    "CLOSED_MESSAGE",
    "DEFAULT_MAX_BATCH_BYTES",
    "MAX_CHUNKER_VALUE",
    "AsyncWriterTransport",
    "AutoTunedChunkerOptions",
    "CellRef",
    "ChunkerOptions",
    "ConstantChunkerOptions",
    "InternalTrajectoryWriter",
    "OutgoingBatch",
    "WriterTransport",
    "format_shape",
    "module",
    "new_key",
]
