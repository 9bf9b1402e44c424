"""TFRecord framing, ZLIB streams, and detection of damaged files (_storage.tfrecord)."""

from __future__ import annotations

import logging
import os
import random
import struct
import zlib
from pathlib import Path

import pytest

from reverb_py import errors
from reverb_py._storage import tfrecord
from reverb_py._storage.tfrecord import (
    COMPRESSION_NONE,
    COMPRESSION_ZLIB,
    CorruptRecordError,
    RecordReader,
    RecordWriter,
    encode_record,
    masked_crc32c,
    read_records,
)


def reference_crc32c(data: bytes) -> int:
    """Bit-by-bit CRC32C (Castagnoli, reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def reference_mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records_for_test() -> list[bytes]:
    rng = random.Random(7)
    return [
        b"",
        b"123456789",
        b"x" * 1000,
        bytes(rng.getrandbits(8) for _ in range(3000)),
        b"compressible " * 10_000,  # 130 kB: goes through the compressor alone.
        rng.randbytes(100_000),  # Incompressible: stored deflate blocks.
        b"compressible " * 100,
        rng.randbytes(20_000),  # Probed (>= 16 KiB) and stored.
        b"compressible " * 100,  # Must not refer back across the stored bytes.
        b"tail",
    ]


def write_file(path: Path, records: list[bytes], compression: str) -> None:
    with RecordWriter(path, compression) as writer:
        for record in records:
            writer.write(record)


# ---------------------------------------------------------------------------- checksums


def test_crc32c_known_vectors() -> None:
    # RFC 3720 (iSCSI) test vectors and the classic check value.
    assert reference_crc32c(b"123456789") == 0xE3069283
    assert reference_crc32c(bytes(32)) == 0x8A9136AA
    assert reference_crc32c(b"\xff" * 32) == 0x62A8AB43
    # The mask, worked by hand: (0xE3069283 >> 15) | (0x1283 << 17) = 0x2507C60D,
    # + 0xA282EAD8 = 0xC78AB0E5.
    assert masked_crc32c(b"123456789") == 0xC78AB0E5
    assert masked_crc32c(b"") == 0xA282EAD8  # CRC of nothing is 0.
    rng = random.Random(1)
    for size in (1, 7, 8, 100, 1000):
        data = rng.randbytes(size)
        assert masked_crc32c(data) == reference_mask(reference_crc32c(data))


def test_exact_bytes_of_a_tiny_record() -> None:
    length = struct.pack("<Q", 9)
    assert reference_crc32c(length) == 0x872FCB77
    expected = (
        b"\x09\x00\x00\x00\x00\x00\x00\x00"  # length 9
        + struct.pack("<I", 0x3971F937)  # masked CRC32C of the length bytes
        + b"123456789"
        + b"\xe5\xb0\x8a\xc7"  # masked CRC32C of the payload, 0xC78AB0E5
    )
    assert reference_mask(0x872FCB77) == 0x3971F937
    assert encode_record(b"123456789") == expected
    # An empty record: zero length, its checksum, no payload, the checksum of nothing.
    assert reference_mask(reference_crc32c(bytes(8))) == 0x07980329
    assert encode_record(b"") == bytes(8) + b"\x29\x03\x98\x07" + b"\xd8\xea\x82\xa2"


def test_uncompressed_file_is_the_concatenated_frames(tmp_path: Path) -> None:
    records = records_for_test()
    write_file(tmp_path / "f", records, COMPRESSION_NONE)
    assert (tmp_path / "f").read_bytes() == b"".join(encode_record(r) for r in records)


def test_zlib_file_is_one_standard_zlib_stream_of_the_frames(tmp_path: Path) -> None:
    records = records_for_test()
    write_file(tmp_path / "f", records, COMPRESSION_ZLIB)
    data = (tmp_path / "f").read_bytes()
    decompressor = zlib.decompressobj()
    assert decompressor.decompress(data) == b"".join(encode_record(r) for r in records)
    assert decompressor.eof and not decompressor.unused_data
    # The incompressible records were stored, not inflated by the compressor.
    assert len(data) < sum(len(r) for r in records)


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_ZLIB])
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "detected"])
def test_round_trip(tmp_path: Path, compression: str, declared: bool) -> None:
    records = records_for_test()
    write_file(tmp_path / "f", records, compression)
    with RecordReader(tmp_path / "f", compression if declared else None) as reader:
        assert list(reader) == records
        assert reader.compression == compression
        assert reader.num_records == len(records)
        assert reader.bytes_read == sum(len(r) + 16 for r in records)


def test_writer_counts(tmp_path: Path) -> None:
    with RecordWriter(tmp_path / "f") as writer:
        writer.write(b"abc")
        writer.write(b"")
        assert (writer.num_records, writer.bytes_written) == (2, 3 + 16 + 16)


@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_ZLIB])
def test_empty_file_round_trip(tmp_path: Path, compression: str) -> None:
    write_file(tmp_path / "f", [], compression)
    assert list(read_records(tmp_path / "f")) == []


def test_reads_a_stream_compressed_in_one_go(tmp_path: Path) -> None:
    """A file as TensorFlow writes it: the frames through zlib at the default level."""
    records = records_for_test()
    (tmp_path / "f").write_bytes(zlib.compress(b"".join(encode_record(r) for r in records)))
    assert list(read_records(tmp_path / "f")) == records


def test_large_payload_read_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfrecord, "_READ_PIECE", 1000)
    records = [os.urandom(10_500), b"z" * 4321]
    for compression in (COMPRESSION_NONE, COMPRESSION_ZLIB):
        write_file(tmp_path / "f", records, compression)
        assert list(read_records(tmp_path / "f")) == records


def test_bogus_length_with_valid_checksum_is_a_truncation(tmp_path: Path) -> None:
    # A length field claiming a terabyte (with a matching CRC): must not try to allocate.
    length = struct.pack("<Q", 1 << 40)
    frame = length + struct.pack("<I", masked_crc32c(length)) + b"short"
    (tmp_path / "f").write_bytes(frame)
    with pytest.raises(CorruptRecordError, match="truncated record"):
        list(read_records(tmp_path / "f"))


def test_writer_refuses_writes_after_close_and_bad_compression(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path / "f")
    writer.close()
    writer.close()  # Idempotent.
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"x")
    with pytest.raises(ValueError, match="Unsupported"):
        RecordWriter(tmp_path / "g", "GZIP")
    with pytest.raises(ValueError, match="Unsupported"):
        RecordReader(tmp_path / "f", "GZIP")


def test_writer_context_manager_on_error_leaves_an_unfinished_stream(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), RecordWriter(tmp_path / "f") as writer:
        writer.write(b"a" * 100)
        raise RuntimeError("boom")
    with pytest.raises(CorruptRecordError):
        list(read_records(tmp_path / "f", COMPRESSION_ZLIB))


# ---------------------------------------------------------------------------- damage


def small_records() -> list[bytes]:
    return [b"first record", b"", b"third" * 20]


def test_error_type() -> None:
    error = CorruptRecordError("bad", "/x/items.tfrecord")
    assert isinstance(error, errors.ReverbError)
    assert isinstance(error, ValueError)
    assert str(error) == "/x/items.tfrecord: bad"
    assert error.path == "/x/items.tfrecord"
    assert CorruptRecordError is errors.CorruptRecordError


@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_ZLIB])
def test_every_flipped_byte_is_detected(tmp_path: Path, compression: str) -> None:
    write_file(tmp_path / "good", small_records(), compression)
    good = (tmp_path / "good").read_bytes()
    for position in range(len(good)):
        for flip in (0x01, 0x80):
            damaged = bytearray(good)
            damaged[position] ^= flip
            (tmp_path / "bad").write_bytes(bytes(damaged))
            try:
                records = list(read_records(tmp_path / "bad"))
            except CorruptRecordError as error:
                assert str(tmp_path / "bad") in str(error)
            else:
                # Only a bit that carries no data (deflate's padding after a block) may
                # flip unnoticed, and then every record reads back unchanged.
                assert compression == COMPRESSION_ZLIB, position
                assert records == small_records(), position


def test_flipped_payload_byte_message(tmp_path: Path) -> None:
    write_file(tmp_path / "f", small_records(), COMPRESSION_NONE)
    data = bytearray((tmp_path / "f").read_bytes())
    data[12 + 3] ^= 0x10  # In the first payload.
    (tmp_path / "f").write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match=r"record 0 .*checksum mismatch in the payload"):
        list(read_records(tmp_path / "f"))


def test_flipped_length_byte_message(tmp_path: Path) -> None:
    write_file(tmp_path / "f", small_records(), COMPRESSION_NONE)
    data = bytearray((tmp_path / "f").read_bytes())
    second = 12 + len(b"first record") + 4
    data[second] ^= 0x01
    (tmp_path / "f").write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match=r"record 1 .*length field"):
        list(read_records(tmp_path / "f", COMPRESSION_NONE))


def test_uncompressed_truncation_inside_a_record_is_detected(tmp_path: Path) -> None:
    records = small_records()
    write_file(tmp_path / "good", records, COMPRESSION_NONE)
    good = (tmp_path / "good").read_bytes()
    boundaries = {0}
    offset = 0
    for record in records:
        offset += len(record) + 16
        boundaries.add(offset)
    for cut in range(len(good)):
        (tmp_path / "bad").write_bytes(good[:cut])
        if cut in boundaries:
            # A cut between records is invisible without compression (as in TensorFlow).
            assert len(list(read_records(tmp_path / "bad", COMPRESSION_NONE))) < len(records)
        else:
            with pytest.raises(CorruptRecordError, match="truncated"):
                list(read_records(tmp_path / "bad", COMPRESSION_NONE))


def test_zlib_truncation_anywhere_is_detected(tmp_path: Path) -> None:
    write_file(tmp_path / "good", small_records() + [os.urandom(20_000)], COMPRESSION_ZLIB)
    good = (tmp_path / "good").read_bytes()
    for cut in list(range(1, 40)) + list(range(40, len(good), 97)) + [len(good) - 1]:
        (tmp_path / "bad").write_bytes(good[:cut])
        with pytest.raises(CorruptRecordError):
            list(read_records(tmp_path / "bad"))


def test_data_after_the_zlib_stream_is_detected(tmp_path: Path) -> None:
    write_file(tmp_path / "f", small_records(), COMPRESSION_ZLIB)
    with open(tmp_path / "f", "ab") as file:
        file.write(b"\x00")
    with pytest.raises(CorruptRecordError, match="after the end of the zlib stream"):
        list(read_records(tmp_path / "f"))


def test_garbage_file_is_corrupt(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"this is not a TFRecord file at all")
    with pytest.raises(CorruptRecordError):
        list(read_records(tmp_path / "f"))


# ---------------------------------------------------------------------------- batches


def mixed_records() -> list[bytes]:
    rng = random.Random(11)
    records = records_for_test()
    records += [rng.choice([b"", b"ab", b"small " * 20, rng.randbytes(300)]) for _ in range(500)]
    records += [b"compressible " * 3000, rng.randbytes(70_000), b"end"]
    return records


@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_ZLIB])
def test_write_many_and_write_framed_give_the_same_records(
    tmp_path: Path, compression: str
) -> None:
    records = mixed_records()
    with RecordWriter(tmp_path / "f", compression) as writer:
        writer.write_many(records[:300])
        framed = b"".join(encode_record(r) for r in records[300:400])
        writer.write_framed(framed, 100)
        writer.write_many(records[400:])
        assert writer.num_records == len(records)
        assert writer.bytes_written == sum(len(r) + 16 for r in records)
    assert list(read_records(tmp_path / "f", compression)) == records
    with pytest.raises(ValueError, match="closed"):
        writer.write_framed(b"", 0)


def test_compressed_in_many_segments_is_one_standard_zlib_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tfrecord, "_SEGMENT", 4096)
    monkeypatch.setattr(tfrecord, "_BATCH_SIZE", 5000)
    monkeypatch.setattr(tfrecord, "_IN_FLIGHT", 2)
    records = mixed_records()
    write_file(tmp_path / "f", records, COMPRESSION_ZLIB)
    raw = (tmp_path / "f").read_bytes()
    assert zlib.decompress(raw) == b"".join(encode_record(r) for r in records)
    assert list(read_records(tmp_path / "f")) == records


def test_compresses_in_the_calling_thread_when_no_worker_can_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Refusing:
        def submit(self, *args: object) -> None:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(tfrecord, "_deflate_pool", Refusing)
    records = mixed_records()
    write_file(tmp_path / "f", records, COMPRESSION_ZLIB)
    assert zlib.decompress((tmp_path / "f").read_bytes()) == b"".join(
        encode_record(r) for r in records
    )


def test_a_forked_process_gets_its_own_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = tfrecord._deflate_pool()
    assert tfrecord._deflate_pool() is pool
    monkeypatch.setattr(tfrecord, "_pool", pool)
    monkeypatch.setattr(tfrecord, "_pool_pid", -1)  # As seen from a forked child.
    fresh = tfrecord._deflate_pool()
    try:
        assert fresh is not pool
        assert fresh.submit(sum, [1, 2]).result() == 3
    finally:
        fresh.shutdown()


def test_adler32_combine() -> None:
    rng = random.Random(12)
    for _ in range(300):
        first = rng.randbytes(rng.randrange(0, 100))
        second = rng.randbytes(rng.choice([0, 1, 65520, 65521, 65522, rng.randrange(200_000)]))
        combined = tfrecord._adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
        assert combined == zlib.adler32(first + second)


def test_abort_with_segments_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfrecord, "_BATCH_SIZE", 1000)
    writer = RecordWriter(tmp_path / "f")
    writer.write_many([b"x" * 900] * 20)
    writer.abort()
    writer.abort()
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"")


@pytest.mark.parametrize("compression", [COMPRESSION_NONE, COMPRESSION_ZLIB])
def test_batches_with_records_larger_than_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    monkeypatch.setattr(tfrecord, "_READ_BLOCK", 100)
    monkeypatch.setattr(tfrecord, "_READ_PIECE", 1000)
    records = mixed_records()
    write_file(tmp_path / "f", records, compression)
    with RecordReader(tmp_path / "f") as reader:
        batches = list(reader.batches())
        assert [r for batch in batches for r in batch] == records
        assert all(batches)
        assert reader.num_records == len(records)
        assert reader.bytes_read == sum(len(r) + 16 for r in records)


def test_damage_is_found_at_every_block_boundary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tfrecord, "_READ_BLOCK", 37)
    records = [b"", b"abc", b"x" * 50, b"y" * 7, b"z" * 120]
    frames = b"".join(encode_record(r) for r in records)
    for position in range(len(frames)):
        damaged = bytearray(frames)
        damaged[position] ^= 0x10
        (tmp_path / "f").write_bytes(bytes(damaged))
        with pytest.raises(CorruptRecordError, match="checksum mismatch|truncated"):
            list(read_records(tmp_path / "f", COMPRESSION_NONE))
    boundaries = {sum(len(r) + 16 for r in records[:n]) for n in range(len(records) + 1)}
    for end in range(1, len(frames)):
        (tmp_path / "f").write_bytes(frames[:end])
        got: list[bytes] = []
        if end in boundaries:  # A shorter file, not a damaged one.
            got.extend(read_records(tmp_path / "f", COMPRESSION_NONE))
        else:
            with pytest.raises(CorruptRecordError, match="truncated"):
                got.extend(read_records(tmp_path / "f", COMPRESSION_NONE))
        assert got == records[: len(got)]


def test_the_slow_crc32c_warning_is_logged_once_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tfrecord._impl, "IMPLEMENTATION", "python")
    monkeypatch.setattr(tfrecord.google_crc32c, "implementation", "python", raising=False)
    monkeypatch.setattr(tfrecord, "_checked_crc32c", False)
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        for _ in range(2):
            with RecordWriter(tmp_path / "f") as writer:
                writer.write(b"x")
            assert list(read_records(tmp_path / "f")) == [b"x"]
    assert caplog.text.count("checkpoint checksums use its slow pure-Python fallback") == 1
