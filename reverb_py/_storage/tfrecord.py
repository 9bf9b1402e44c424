"""TFRecord files, as TensorFlow writes and reads them, without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64 length (little-endian)
    uint32 masked CRC32C of the 8 length bytes (little-endian)
    bytes  payload (``length`` bytes)
    uint32 masked CRC32C of the payload (little-endian)

where ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)``. With
TensorFlow's ``ZLIB`` option the whole framed stream is one zlib (RFC 1950) stream.

:class:`RecordWriter` streams records to a file (constant memory, flushed and fsynced on
close), one at a time or many already framed together; :func:`read_records` /
:class:`RecordReader` stream them back (a block of records at a time) and raise
:class:`CorruptRecordError` on a checksum mismatch, a truncated file or a damaged zlib
stream. Reading detects the compression: a file whose first 12 bytes form a valid
uncompressed record header is read as uncompressed, anything else as ZLIB (the same
files Reverb's "try ZLIB, fall back to uncompressed" accepts, decided up front).

CRC32C comes from ``google-crc32c`` (C implementation, pure-Python fallback).
"""

from __future__ import annotations

import collections
import io
import logging
import os
import struct
import threading
import warnings
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import IO, Any

from reverb_py import _impl
from reverb_py._pure._common import CRC as _CRC
from reverb_py._pure._common import FOOTER_SIZE as _FOOTER_SIZE
from reverb_py._pure._common import HEADER as _HEADER
from reverb_py._pure._common import HEADER_SIZE as _HEADER_SIZE
from reverb_py._pure._common import LENGTH as _LENGTH
from reverb_py.errors import CorruptRecordError

with warnings.catch_warnings():
    # google-crc32c warns (RuntimeWarning) when only its pure-Python fallback imports;
    # report that once through logging instead of failing warning-strict callers.
    warnings.simplefilter("ignore", RuntimeWarning)
    import google_crc32c

__all__ = [
    "COMPRESSION_NONE",
    "COMPRESSION_ZLIB",
    "CorruptRecordError",
    "RecordReader",
    "RecordWriter",
    "encode_record",
    "masked_crc32c",
    "read_records",
]

_logger = logging.getLogger("reverb_py")

COMPRESSION_NONE = ""
COMPRESSION_ZLIB = "ZLIB"

# The record framing (_HEADER, _LENGTH, _CRC and their sizes) is the checkpoint_records
# twins': imported above from the pure one, which the compiled one matches.

# Records smaller than this are gathered in a buffer and compressed/written in batches;
# larger payloads are handed on as they are (no copy).
_SMALL_RECORD = 64 * 1024
_BATCH_SIZE = 1024 * 1024
_IO_BUFFER = 1024 * 1024
# Payloads at least _PROBE_MIN long are probed and stored uncompressed when deflate
# gains less than 3% on the probe.
_PROBE_MIN = 16 * 1024
_PROBE_SIZE = 4096
_STORE_RATIO = 0.97
_MAX_STORED_BLOCK = 0xFFFF
_STORED_BLOCK_HEADER = struct.Struct("<BHH")
# Deflate, 32 KiB window, no dictionary. The level bits only describe the compressor and
# are ignored by inflaters.
_ZLIB_HEADER = b"\x78\x9c"
_ADLER = struct.Struct(">I")
_ADLER_BASE = 65521
# An empty final deflate block (fixed Huffman codes, just the end-of-block code).
_FINAL_BLOCK = b"\x03\x00"
# PERF(parallel-deflate): the stream is compressed as independent segments of about this
# size in worker threads (zlib releases the GIL), at most _IN_FLIGHT at a time per writer.
_SEGMENT = 1024 * 1024
_IN_FLIGHT = 4
_MAX_WORKERS = 4
# Compressed input is fed to the decompressor in blocks this large: small enough that the
# unconsumed tail it copies on each call stays cheap (1 MiB blocks triple load time).
_ZLIB_INPUT_BLOCK = 64 * 1024
_ZLIB_OUTPUT_BUFFER = 256 * 1024
# Payloads above this are read in pieces, so a damaged length field cannot make the
# reader allocate the claimed size up front.
_READ_PIECE = 16 * 1024 * 1024
# The reader takes the (uncompressed) stream in blocks this large and splits each into
# records in one call.
_READ_BLOCK = 1024 * 1024


_checked_crc32c = False


def _check_crc32c() -> None:
    """Warns once, on the first file opened, when checksums take the slow path."""
    global _checked_crc32c
    if _checked_crc32c:
        return
    _checked_crc32c = True
    if (  # pragma: no cover - env-dependent
        _impl.IMPLEMENTATION == "python" and getattr(google_crc32c, "implementation", "c") != "c"
    ):
        # The pure twin of checkpoint_records takes its CRC32C from google-crc32c.
        _logger.warning(
            "google-crc32c has no C extension here: checkpoint checksums use its slow "
            "pure-Python fallback."
        )


masked_crc32c = _impl.checkpoint_records.masked_crc32c
"""TFRecord's masked CRC32C of ``data`` (the selected ``checkpoint_records`` twin's)."""


def _header(length: int) -> bytes:
    length_bytes = _LENGTH.pack(length)
    return length_bytes + _CRC.pack(masked_crc32c(length_bytes))


def encode_record(payload: bytes) -> bytes:
    """One framed (uncompressed) record."""
    payload = bytes(payload)
    return _header(len(payload)) + payload + _CRC.pack(masked_crc32c(payload))


class RecordWriter:
    """Writes records to a new TFRecord file, streaming.

    Args:
      path: The file to create (truncated if it exists).
      compression: :data:`COMPRESSION_ZLIB` (default, as Reverb's checkpoints) or
        :data:`COMPRESSION_NONE`.
      compression_level: zlib level. PERF(zlib-level): 1 by default, the fastest; a
        checkpoint save spends a third of its time compressing at zlib's default level,
        and every level reads back the same.

    With ZLIB the file is one standard zlib stream (any inflater, TensorFlow's included,
    reads it). It is compressed in independent segments of about a MiB, each by a fresh
    compressor in a worker thread and ended byte-aligned, then written in order, so
    compression runs beside the caller's work and on several cores. Large payloads that
    do not compress (a probe of 4 KiB from their middle gains under 3%; e.g.
    snappy-compressed chunk data) go into *stored* deflate blocks instead of through
    the compressor, which would spend ~20 ns a byte for nothing.

    :meth:`close` flushes everything and fsyncs the file; a writer used as a context
    manager closes on success and only releases the file on an exception.

    Attributes:
      num_records: Records written so far.
      bytes_written: Framed (uncompressed) bytes written so far.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        compression: str = COMPRESSION_ZLIB,
        *,
        compression_level: int = 1,
    ) -> None:
        if compression not in (COMPRESSION_NONE, COMPRESSION_ZLIB):
            raise ValueError(f"Unsupported TFRecord compression {compression!r}.")
        _check_crc32c()
        self.path = os.fspath(path)
        self._file: IO[bytes] | None = open(self.path, "wb", buffering=_IO_BUFFER)  # noqa: SIM115
        self._level: int | None = None
        self._adler = 1
        self._jobs: collections.deque[Future[_Segment] | _Segment] = collections.deque()
        if compression == COMPRESSION_ZLIB:
            # A raw deflate stream framed by hand as zlib (RFC 1950): header, blocks,
            # Adler-32 of the uncompressed bytes. Framing it ourselves lets independently
            # compressed segments and stored blocks follow each other.
            zlib.compressobj(compression_level)  # Checks the level now.
            self._level = compression_level
            self._file.write(_ZLIB_HEADER)
        self._pending = bytearray()
        self.num_records = 0
        self.bytes_written = 0

    def _submit(
        self, work: Callable[[tuple[Any, ...], int], _Segment], pieces: tuple[Any, ...]
    ) -> None:
        """Queues ``work(pieces, level)`` for a worker thread; writes finished segments."""
        assert self._level is not None
        try:
            job: Future[_Segment] | _Segment = _deflate_pool().submit(work, pieces, self._level)
        except RuntimeError:  # Interpreter shutdown: no new threads.
            job = work(pieces, self._level)
        self._jobs.append(job)
        self._drain(_IN_FLIGHT)

    def _drain(self, keep: int) -> None:
        """Writes the oldest segments, in order, until at most ``keep`` are queued."""
        file = self._file
        assert file is not None
        jobs = self._jobs
        while len(jobs) > keep:
            job = jobs.popleft()
            pieces, adler, length = job.result() if isinstance(job, Future) else job
            self._adler = _adler32_combine(self._adler, adler, length)
            for piece in pieces:
                file.write(piece)

    def _sink(self, data: bytes | bytearray, head: bytes = b"") -> None:
        """Writes ``head`` then ``data`` (compressed when compressing)."""
        assert self._file is not None
        if self._level is None:
            self._file.write(head)
            self._file.write(data)
            return
        if len(data) <= 2 * _SEGMENT:
            self._submit(_deflate, (head, data))
            return
        view = memoryview(data)
        for start in range(0, len(view), _SEGMENT):
            self._submit(_deflate, (head, view[start : start + _SEGMENT]))
            head = b""

    def _store(self, data: bytes, head: bytes = b"") -> None:
        """Writes ``head`` then ``data`` uncompressed (stored deflate blocks when
        compressing)."""
        assert self._file is not None
        if self._level is None:
            self._file.write(head)
            self._file.write(data)
            return
        self._submit(_stored, (head, data))

    def _take_head(self, header: bytes) -> bytes:
        """``header`` after what is pending: returned to go out with the next payload
        when that is little (no segment of its own), else written now."""
        pending = self._pending
        pending += header
        if len(pending) >= _SMALL_RECORD:
            self._flush_pending()
            return b""
        self._pending = bytearray()
        return bytes(pending)

    def _flush_pending(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, bytearray()
            self._sink(pending)

    def write_framed(self, framed: bytes, num_records: int) -> None:
        """Appends ``num_records`` records already framed together (e.g. by
        ``checkpoint_records.frame_records``), as they are."""
        if self._file is None:
            raise ValueError(f"{self.path}: write to a closed RecordWriter.")
        pending = self._pending
        pending += framed
        if len(pending) >= _BATCH_SIZE:
            self._flush_pending()
        self.num_records += num_records
        self.bytes_written += len(framed)

    def write_many(self, payloads: list[bytes]) -> None:
        """Appends one record per payload, in order.

        PERF(framing): small payloads are framed together in one call; large ones go
        through :meth:`write` (probed for compressibility, never copied).
        """
        limit = _PROBE_MIN if self._level is not None else _SMALL_RECORD
        small: list[bytes] = []
        for payload in payloads:
            if len(payload) < limit:
                small.append(payload)
                continue
            if small:
                self.write_framed(_frame_records(small), len(small))
                small = []
            self.write(payload)
        if small:
            self.write_framed(_frame_records(small), len(small))

    def write(self, payload: bytes) -> None:
        """Appends one record."""
        if self._file is None:
            raise ValueError(f"{self.path}: write to a closed RecordWriter.")
        length = len(payload)
        length_bytes = _LENGTH.pack(length)
        header = length_bytes + _CRC.pack(masked_crc32c(length_bytes))
        footer = _CRC.pack(masked_crc32c(payload))
        if length >= _PROBE_MIN and self._level is not None and _incompressible(payload):
            self._store(payload, self._take_head(header))
            self._pending += footer
        elif length < _SMALL_RECORD:
            pending = self._pending
            pending += header
            pending += payload
            pending += footer
            if len(pending) >= _BATCH_SIZE:
                self._flush_pending()
        else:
            self._sink(payload, self._take_head(header))
            self._pending += footer
        self.num_records += 1
        self.bytes_written += length + _HEADER_SIZE + _FOOTER_SIZE

    def close(self) -> None:
        """Finishes the stream, flushes and fsyncs the file. Idempotent."""
        file = self._file
        if file is None:
            return
        try:
            self._flush_pending()
            if self._level is not None:
                self._drain(0)
                file.write(_FINAL_BLOCK)
                file.write(_ADLER.pack(self._adler))
            file.flush()
            os.fsync(file.fileno())
        finally:
            self._file = None
            file.close()

    def abort(self) -> None:
        """Releases the file without finishing it (its content is then incomplete)."""
        file, self._file = self._file, None
        for job in self._jobs:
            if isinstance(job, Future):
                job.cancel()
        self._jobs.clear()
        if file is not None:
            try:
                file.close()
            except OSError:  # pragma: no cover - best effort
                pass

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


_Segment = tuple[list[Any], int, int]
"""A piece of the deflate stream: its bytes (a list of pieces), the Adler-32 and the
length of the uncompressed data it holds."""


def _deflate(pieces: tuple[Any, ...], level: int) -> _Segment:
    """``pieces`` (one after the other) as deflate blocks of a fresh compressor, ended
    byte-aligned (no final block), so segments can follow each other in one stream."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    out = []
    adler = 1
    length = 0
    for data in pieces:
        out.append(compressor.compress(data))
        adler = zlib.adler32(data, adler)
        length += len(data)
    out.append(compressor.flush(zlib.Z_SYNC_FLUSH))
    return out, adler, length


def _stored(pieces: tuple[Any, ...], level: int) -> _Segment:
    """``pieces`` (one after the other) as stored (uncompressed) deflate blocks."""
    del level
    out: list[Any] = []
    adler = 1
    length = 0
    for data in pieces:
        view = memoryview(data)
        for start in range(0, len(view), _MAX_STORED_BLOCK):
            block = view[start : start + _MAX_STORED_BLOCK]
            size = len(block)
            out.append(_STORED_BLOCK_HEADER.pack(0, size, size ^ 0xFFFF))
            out.append(block)
        adler = zlib.adler32(view, adler)
        length += len(view)
    return out, adler, length


def _adler32_combine(adler1: int, adler2: int, length2: int) -> int:
    """The Adler-32 of two byte strings one after the other, from theirs (zlib's
    ``adler32_combine``)."""
    base = _ADLER_BASE
    remainder = length2 % base
    sum1 = adler1 & 0xFFFF
    sum2 = (remainder * sum1) % base
    sum1 = (sum1 + (adler2 & 0xFFFF) + base - 1) % base
    sum2 = (sum2 + (adler1 >> 16) + (adler2 >> 16) + base - remainder) % base
    return sum1 | (sum2 << 16)


_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _deflate_pool() -> ThreadPoolExecutor:
    """The worker threads that compress segments, shared by all writers (made on first
    use, and again in a forked child, which has none of its parent's threads)."""
    global _pool, _pool_pid
    with _pool_lock:
        pid = os.getpid()
        if _pool is None or _pool_pid != pid:
            _pool = ThreadPoolExecutor(
                max_workers=max(1, min(_MAX_WORKERS, os.cpu_count() or 1)),
                thread_name_prefix="reverb_py-deflate",
            )
            _pool_pid = pid
        return _pool


def _incompressible(payload: bytes) -> bool:
    """Whether deflate would gain (almost) nothing on ``payload``, judged by a probe."""
    middle = len(payload) // 2
    probe = payload[middle - _PROBE_SIZE // 2 : middle + _PROBE_SIZE // 2]
    return len(zlib.compress(probe, 1)) >= len(probe) * _STORE_RATIO


class _ZlibRawReader(io.RawIOBase):
    """The decompressed content of a file holding exactly one zlib stream."""

    def __init__(self, file: IO[bytes], path: str) -> None:
        super().__init__()
        self._file = file
        self._path = path
        self._decompressor = zlib.decompressobj(zlib.MAX_WBITS)
        self.compressed_bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = len(buffer)
        if size == 0:
            return 0
        decompressor = self._decompressor
        while True:
            if decompressor.eof:
                self._check_trailer()
                return 0
            data = decompressor.unconsumed_tail
            if not data:
                data = self._file.read(_ZLIB_INPUT_BLOCK)
                if not data:
                    raise CorruptRecordError(
                        "truncated file: the zlib stream ends before its end marker.",
                        self._path,
                    )
                self.compressed_bytes_read += len(data)
            try:
                out = decompressor.decompress(data, size)
            except zlib.error as error:
                raise CorruptRecordError(f"damaged zlib stream ({error}).", self._path) from None
            if out:
                n = len(out)
                buffer[:n] = out
                return n

    def _check_trailer(self) -> None:
        if self._decompressor.unused_data or self._file.read(1):
            raise CorruptRecordError(
                "unexpected data after the end of the zlib stream.", self._path
            )

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            super().close()


def _looks_uncompressed(head: bytes) -> bool:
    """Whether ``head`` starts with a valid uncompressed record header."""
    if len(head) < _HEADER_SIZE:
        return False
    length_bytes = head[:8]
    masked: int = _CRC.unpack_from(head, 8)[0]
    return masked == masked_crc32c(length_bytes)


class RecordReader:
    """Reads the records of a TFRecord file, streaming.

    Args:
      path: The file.
      compression: None to detect (default), or :data:`COMPRESSION_ZLIB` /
        :data:`COMPRESSION_NONE` to insist on one.

    Iterating yields each record's payload. A damaged file raises
    :class:`CorruptRecordError` (naming the file and the record) when the damage is
    reached; the whole file is checked by the time iteration ends, including the zlib
    stream's own checksum.

    Attributes:
      compression: The compression in use.
      num_records: Records read so far.
      bytes_read: Framed (uncompressed) bytes read so far.
    """

    def __init__(self, path: str | os.PathLike[str], compression: str | None = None) -> None:
        _check_crc32c()
        self.path = os.fspath(path)
        file = open(self.path, "rb", buffering=_IO_BUFFER)  # noqa: SIM115
        try:
            if compression is None:
                head = file.read(_HEADER_SIZE)
                file.seek(0)
                compression = (
                    COMPRESSION_NONE if not head or _looks_uncompressed(head) else COMPRESSION_ZLIB
                )
            if compression == COMPRESSION_ZLIB:
                self._raw: _ZlibRawReader | None = _ZlibRawReader(file, self.path)
                self._stream: IO[bytes] = io.BufferedReader(self._raw, _ZLIB_OUTPUT_BUFFER)
            elif compression == COMPRESSION_NONE:
                self._raw = None
                self._stream = file
            else:
                raise ValueError(f"Unsupported TFRecord compression {compression!r}.")
        except BaseException:
            file.close()
            raise
        self._file = file
        self.compression = compression
        self.num_records = 0
        self.bytes_read = 0

    def _corrupt(self, what: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"record {self.num_records} (at uncompressed offset {self.bytes_read}): {what}",
            self.path,
        )

    def _read_payload_bytes(self, length: int) -> bytes:
        """Up to ``length`` bytes of the stream (fewer only at its end)."""
        read = self._stream.read
        if length <= _READ_PIECE:
            return read(length)
        pieces = []
        remaining = length
        while remaining:
            piece = read(min(remaining, _READ_PIECE))
            if not piece:
                break
            pieces.append(piece)
            remaining -= len(piece)
        return b"".join(pieces)

    def __iter__(self) -> Iterator[bytes]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[bytes]]:
        """Yields the payloads in order, as lists: the records of a block of the file
        at a time (a record larger than a block is read whole).

        Raises:
          CorruptRecordError: when the damage is reached (the records before it have
            been yielded).
        """
        split = _split_records
        pending = b""
        while True:
            missing = self._check_partial(pending)
            block = self._read_payload_bytes(max(_READ_BLOCK, missing))
            if not block:
                break
            data = pending + block if pending else block
            payloads, end = split(data, 0)
            if payloads:
                self.num_records += len(payloads)
                self.bytes_read += end
                yield payloads
            pending = data[end:] if end else data
        if pending:
            self._report_tail(pending)

    def _check_partial(self, pending: bytes) -> int:
        """How many more bytes the record at the start of ``pending`` needs (0 when
        its header is incomplete); raises if it is damaged."""
        if len(pending) < _HEADER_SIZE:
            return 0
        length, length_crc = _HEADER.unpack_from(pending)
        if masked_crc32c(pending[:8]) != length_crc:
            raise self._corrupt("checksum mismatch in the length field.")
        missing: int = length + _HEADER_SIZE + _FOOTER_SIZE - len(pending)
        if missing <= 0:  # Complete, yet refused by split_records.
            raise self._corrupt("checksum mismatch in the payload.")
        return missing

    def _report_tail(self, pending: bytes) -> None:
        """Raises for an incomplete record at the end of the file."""
        if len(pending) < _HEADER_SIZE:
            raise self._corrupt(
                f"truncated record header ({len(pending)} of {_HEADER_SIZE} bytes)."
            )
        self._check_partial(pending)
        length = _LENGTH.unpack_from(pending)[0]
        present = len(pending) - _HEADER_SIZE
        if present < length:
            raise self._corrupt(f"truncated record: {present} of {length} payload bytes present.")
        raise self._corrupt("truncated record: its payload checksum is missing.")

    def fileno(self) -> int:
        """The descriptor of the underlying file."""
        return self._file.fileno()

    def close(self) -> None:
        self._stream.close()
        self._file.close()

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_split_records = _impl.checkpoint_records.split_records
_frame_records = _impl.checkpoint_records.frame_records


def read_records(path: str | os.PathLike[str], compression: str | None = None) -> Iterator[bytes]:
    """Yields the payloads of a TFRecord file (see :class:`RecordReader`)."""
    with RecordReader(path, compression) as reader:
        yield from reader
