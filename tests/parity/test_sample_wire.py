"""The compiled SampleStream fast path gives the general path's results, or None.

``_speedups.sample_wire`` reads plain responses, chunks and sample infos from their
bytes; whenever it returns something, it must equal what the general path (protobuf's
messages and ``reverb_py._codec``) gives for the same bytes; for anything it does not
handle (and any corrupted bytes) it must return None, never crash. The pure twin always
returns None.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from reverb_py._client.sampling import SampleAssembler, _info_fields
from reverb_py._codec.chunk import decode_chunk, encode_chunk
from reverb_py._proto import reverb_service_pb2, schema_pb2
from reverb_py._pure import sample_wire as pure
from tests.helpers import compiled_module

NUMERIC = [
    np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128,
]  # fmt: skip


@pytest.fixture
def fast():
    return compiled_module("sample_wire")


def random_column(rng: np.random.Generator, steps: int) -> np.ndarray:
    dtype = NUMERIC[int(rng.integers(len(NUMERIC)))]
    shape = (steps, *rng.integers(0, 4, int(rng.integers(0, 3))))
    return (rng.standard_normal(shape) * 100).astype(dtype)


def test_plain_chunks_decode_as_the_general_path(fast) -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        steps = int(rng.integers(1, 5))
        columns = [random_column(rng, steps) for _ in range(int(rng.integers(1, 4)))]
        data = encode_chunk(int(rng.integers(1, 2**63)), 7, 3, 3 + steps - 1, columns)
        got = fast.decode_chunk_bytes(data)
        expected = decode_chunk(schema_pb2.ChunkData.FromString(data))
        assert got is not None
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype and a.shape == b.shape and a.flags.writeable
            np.testing.assert_array_equal(a, b)
        assert pure.decode_chunk_bytes(data) is None


def test_other_chunks_take_the_general_path(fast) -> None:
    strings = encode_chunk(1, 1, 0, 1, [np.array([b"a", b"bc"], dtype=object)])
    delta = encode_chunk(
        1, 1, 0, 1, [np.arange(6, dtype=np.int32).reshape(2, 3)], delta_encoded=True
    )
    assert fast.decode_chunk_bytes(strings) is None
    assert fast.decode_chunk_bytes(delta) is None
    assert fast.decode_chunk_bytes(b"") is None


def test_corrupted_bytes_never_crash_and_never_differ(fast) -> None:
    rng = random.Random(11)
    base = encode_chunk(9, 2, 0, 1, [np.arange(8, dtype=np.float32).reshape(2, 4)] * 2)
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        raw = bytes(data)
        got = fast.decode_chunk_bytes(raw)
        if got is None:
            continue
        expected = decode_chunk(schema_pb2.ChunkData.FromString(raw))
        assert [a.tobytes() for a in got] == [b.tobytes() for b in expected]
        fast.split_response(raw)
        fast.read_info(raw)


def random_info(rng: np.random.Generator) -> schema_pb2.SampleInfo:
    info = schema_pb2.SampleInfo(
        probability=float(rng.random()),
        table_size=int(rng.integers(0, 2**40)),
        rate_limited=bool(rng.integers(2)),
    )
    item = info.item
    item.key = int(rng.integers(0, 2**63)) * 2 + int(rng.integers(2))
    item.table = "table"
    item.priority = float(rng.standard_normal())
    item.times_sampled = int(rng.integers(-5, 2**31 - 1))
    item.inserted_at.seconds = 12
    for _ in range(int(rng.integers(0, 4))):
        column = item.flat_trajectory.columns.add(squeeze=bool(rng.integers(2)))
        for _ in range(int(rng.integers(0, 3))):
            column.chunk_slices.add(
                chunk_key=int(rng.integers(0, 2**63)),
                offset=int(rng.integers(-3, 100)),
                length=int(rng.integers(0, 100)),
                index=int(rng.integers(0, 5)),
            )
    return info


def test_infos_read_as_from_the_message(fast) -> None:
    rng = np.random.default_rng(3)
    for _ in range(500):
        message = random_info(rng)
        data = message.SerializeToString()
        assert fast.read_info(data) == _info_fields(message)
        assert pure.read_info(data) is None
    assert fast.read_info(b"") == _info_fields(schema_pb2.SampleInfo())


def test_responses_split_as_protobuf_parses_them(fast) -> None:
    rng = np.random.default_rng(8)
    for _ in range(100):
        response = reverb_service_pb2.SampleStreamResponse()
        for _ in range(int(rng.integers(0, 4))):
            entry = response.entries.add(end_of_sequence=bool(rng.integers(2)))
            if rng.integers(2):
                entry.info.CopyFrom(random_info(rng))
            for _ in range(int(rng.integers(0, 3))):
                steps = int(rng.integers(1, 3))
                raw = encode_chunk(
                    int(rng.integers(0, 2**63)), 1, 0, steps - 1, [random_column(rng, steps)]
                )
                entry.data.add().MergeFromString(raw)
        data = response.SerializeToString()
        got = fast.split_response(data)
        assert got is not None
        assert len(got) == len(response.entries)
        for (info, chunks, end), entry in zip(got, response.entries):
            assert end == entry.end_of_sequence
            assert (info is None) == (not entry.HasField("info"))
            if info is not None:
                assert schema_pb2.SampleInfo.FromString(info) == entry.info
            assert [key for key, _ in chunks] == [chunk.chunk_key for chunk in entry.data]
            assert [schema_pb2.ChunkData.FromString(raw) for _, raw in chunks] == list(entry.data)
        assert pure.split_response(data) is None


def test_the_assembler_gives_the_same_samples_either_way() -> None:
    rng = np.random.default_rng(2)
    response = reverb_service_pb2.SampleStreamResponse()
    expected_columns = []
    for sample in range(20):
        steps = int(rng.integers(1, 4))
        columns = [random_column(rng, steps) for _ in range(2)]
        entry = response.entries.add(end_of_sequence=True)
        entry.info.item.key = sample + 1
        entry.info.probability = 0.5
        for index, column in enumerate(columns):
            key = 1000 * (sample + 1) + index
            entry.data.add().MergeFromString(encode_chunk(key, 1, 0, steps - 1, [column]))
            entry.info.item.flat_trajectory.columns.add().chunk_slices.add(
                chunk_key=key, offset=0, length=steps, index=0
            )
        expected_columns.append(columns)
    from_bytes = SampleAssembler().add_bytes(response.SerializeToString())
    from_messages = SampleAssembler().add(response)
    assert len(from_bytes) == len(from_messages) == 20
    for (info_a, cols_a, sq_a), (info_b, cols_b, sq_b), cols in zip(
        from_bytes, from_messages, expected_columns
    ):
        assert info_a == info_b and sq_a == sq_b
        for a, b, c in zip(cols_a, cols_b, cols):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, c)


def test_corrupted_infos_never_crash_and_never_differ(fast) -> None:
    rng = random.Random(13)
    base = random_info(np.random.default_rng(1)).SerializeToString()
    checked = 0
    for _ in range(5000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        raw = bytes(data)
        got = fast.read_info(raw)
        fast.split_response(raw)
        if got is None:
            continue
        checked += 1
        assert got == _info_fields(schema_pb2.SampleInfo.FromString(raw))
    assert checked > 100


def test_streams_of_mixed_responses_reassemble_alike() -> None:
    """Whole plain samples, samples split over entries and responses, string columns,
    shared chunks and multi-slice columns: bytes and messages give the same samples."""
    rng = np.random.default_rng(21)
    for _ in range(30):
        responses = []
        response = reverb_service_pb2.SampleStreamResponse()
        shared = {}
        for sample in range(int(rng.integers(1, 12))):
            steps = int(rng.integers(1, 4))
            if rng.integers(4) == 0:
                column = np.array([b"s%d" % i for i in range(steps)], dtype=object)
            else:
                column = random_column(rng, steps)
            key = int(rng.integers(1, 2**63)) if rng.integers(3) else 77
            if key == 77:
                column = shared.setdefault(77, column)
                steps = len(column)
            raw = encode_chunk(key, 1, 0, steps - 1, [column])
            info = random_info(rng)
            info.item.flat_trajectory.Clear()
            slices = info.item.flat_trajectory.columns.add(
                squeeze=steps == 1 and bool(rng.integers(2))
            )
            if steps > 1 and rng.integers(2):
                slices.chunk_slices.add(chunk_key=key, offset=0, length=1, index=0)
                slices.chunk_slices.add(chunk_key=key, offset=1, length=steps - 1, index=0)
            else:
                slices.chunk_slices.add(chunk_key=key, offset=0, length=steps, index=0)
            if rng.integers(3) == 0:
                # Split: info and chunk in one entry, the end in the next response.
                response.entries.add(info=info).data.add().MergeFromString(raw)
                responses.append(response)
                response = reverb_service_pb2.SampleStreamResponse()
                response.entries.add(end_of_sequence=True)
            else:
                entry = response.entries.add(info=info, end_of_sequence=True)
                entry.data.add().MergeFromString(raw)
        responses.append(response)
        for copy in (True, False):
            by_bytes, by_messages = SampleAssembler(copy=copy), SampleAssembler(copy=copy)
            for message in responses:
                got = by_bytes.add_bytes(message.SerializeToString())
                expected = by_messages.add(message)
                assert len(got) == len(expected)
                for (info_a, cols_a, sq_a), (info_b, cols_b, sq_b) in zip(got, expected):
                    assert info_a == info_b and sq_a == sq_b
                    for a, b in zip(cols_a, cols_b):
                        assert a.dtype == b.dtype and a.shape == b.shape
                        np.testing.assert_array_equal(a, b)
