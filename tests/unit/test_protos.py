"""Wire compatibility of the generated protos with Reverb's and TensorFlow's.

Two kinds of checks:

* descriptor tables: every message's fields (number, type, repeated) as listed in
  docs/REVERB_SPEC.md section 2 and TensorFlow's published protos;
* hand-encoded bytes: small messages serialised and parsed against bytes written out by
  hand from ``tag = field_number << 3 | wire_type`` (wire types: 0 varint, 1 64-bit,
  2 length-delimited, 5 32-bit), which proves the numbers and encodings independently
  of the descriptors.
"""

from __future__ import annotations

import pathlib
import runpy
import struct
from typing import Any

import pytest
from google.protobuf import descriptor as _descriptor
from google.protobuf import descriptor_pb2, timestamp_pb2
from google.protobuf import message as _message

from reverb_py._proto import (
    checkpoint_pb2,
    patterns_pb2,
    reverb_config_pb2,
    reverb_service_pb2,
    schema_pb2,
    struct_pb2,
    tensor_pb2,
    tensor_shape_pb2,
    types_pb2,
)

MODULES = [
    types_pb2,
    tensor_shape_pb2,
    tensor_pb2,
    struct_pb2,
    schema_pb2,
    reverb_service_pb2,
    checkpoint_pb2,
    patterns_pb2,
    reverb_config_pb2,
]

_TYPE_NAMES = {
    getattr(_descriptor.FieldDescriptor, name): name[len("TYPE_") :].lower()
    for name in dir(_descriptor.FieldDescriptor)
    if name.startswith("TYPE_")
}


def _short(full_name: str) -> str:
    return full_name.replace("reverb_py.tensorflow.", "tf.").replace("reverb_py.proto.", "")


def _is_repeated(field: Any) -> bool:
    # Newer runtimes have `is_repeated` and deprecate `label`; protobuf 4.21 has only `label`.
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return bool(field.label == field.LABEL_REPEATED)


def _is_packed(field: Any) -> bool:
    # protobuf 4.21 has no `is_packed`: the fields are declared `[packed = true]`.
    if hasattr(field, "is_packed"):
        return bool(field.is_packed)
    return bool(field.GetOptions().packed)


def _field_table(descriptor: Any) -> dict[str, tuple[int, str]]:
    """``{name: (number, type)}``; type is e.g. ``int64``, ``repeated tf.TensorProto``."""
    table = {}
    for field in descriptor.fields:
        if field.message_type is not None:
            kind = _short(field.message_type.full_name)
        elif field.enum_type is not None:
            kind = _short(field.enum_type.full_name)
        else:
            kind = _TYPE_NAMES[field.type]
        if _is_repeated(field) and not (
            field.message_type is not None and field.message_type.GetOptions().map_entry
        ):
            kind = f"repeated {kind}"
        table[field.name] = (field.number, kind)
    return table


def varint(value: int) -> bytes:
    """Base-128 varint of a non-negative int (negative ints: two's complement 64-bit)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def length_delimited(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


def f64(value: float) -> bytes:
    return struct.pack("<d", value)


def test_varint_helper_matches_known_encodings() -> None:
    assert varint(0) == b"\x00"
    assert varint(1) == b"\x01"
    assert varint(150) == bytes.fromhex("9601")
    assert varint(300) == bytes.fromhex("ac02")
    assert varint(-1) == b"\xff" * 9 + b"\x01"
    assert tag(31, 2) == bytes.fromhex("fa01")
    assert tag(54, 2) == bytes.fromhex("b203")


# ---------------------------------------------------------------- names and packages


def _all_descriptors() -> list[Any]:
    found: list[Any] = []

    def visit(message: Any) -> None:
        found.append(message)
        found.extend(message.enum_types)
        for nested in message.nested_types:
            if not nested.GetOptions().map_entry:
                visit(nested)

    for module in MODULES:
        for message in module.DESCRIPTOR.message_types_by_name.values():
            visit(message)
        found.extend(module.DESCRIPTOR.enum_types_by_name.values())
        found.extend(module.DESCRIPTOR.services_by_name.values())
    return found


def test_every_descriptor_lives_under_reverb_py() -> None:
    descriptors = _all_descriptors()
    assert len(descriptors) > 50
    for descriptor in descriptors:
        assert descriptor.full_name.startswith(("reverb_py.proto.", "reverb_py.tensorflow."))
        assert not descriptor.full_name.startswith(("deepmind.", "tensorflow."))


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__)
def test_file_names_and_packages(module: Any) -> None:
    file = module.DESCRIPTOR
    stem = module.__name__.rsplit(".", 1)[1][: -len("_pb2")]
    assert file.name == f"reverb_py/_proto/{stem}.proto"
    tf_files = {"types", "tensor_shape", "tensor", "struct"}
    assert file.package == ("reverb_py.tensorflow" if stem in tf_files else "reverb_py.proto")


def test_message_names() -> None:
    assert schema_pb2.ChunkData.DESCRIPTOR.full_name == "reverb_py.proto.ChunkData"
    assert tensor_pb2.TensorProto.DESCRIPTOR.full_name == "reverb_py.tensorflow.TensorProto"
    assert struct_pb2.StructuredValue.DESCRIPTOR.full_name == "reverb_py.tensorflow.StructuredValue"
    assert (
        schema_pb2.FlatTrajectory.ChunkSlice.DESCRIPTOR.full_name
        == "reverb_py.proto.FlatTrajectory.ChunkSlice"
    )


# ---------------------------------------------------------------- TensorFlow side


def test_data_type_numbers() -> None:
    expected = {
        "DT_INVALID": 0,
        "DT_FLOAT": 1,
        "DT_DOUBLE": 2,
        "DT_INT32": 3,
        "DT_UINT8": 4,
        "DT_INT16": 5,
        "DT_INT8": 6,
        "DT_STRING": 7,
        "DT_COMPLEX64": 8,
        "DT_INT64": 9,
        "DT_BOOL": 10,
        "DT_BFLOAT16": 14,
        "DT_UINT16": 17,
        "DT_COMPLEX128": 18,
        "DT_HALF": 19,
        "DT_UINT32": 22,
        "DT_UINT64": 23,
    }
    assert dict(types_pb2.DataType.items()) == expected


def test_tensor_shape_fields() -> None:
    assert _field_table(tensor_shape_pb2.TensorShapeProto.DESCRIPTOR) == {
        "dim": (2, "repeated tf.TensorShapeProto.Dim"),
        "unknown_rank": (3, "bool"),
    }
    assert _field_table(tensor_shape_pb2.TensorShapeProto.Dim.DESCRIPTOR) == {
        "size": (1, "int64"),
        "name": (2, "string"),
    }


def test_tensor_proto_fields() -> None:
    assert _field_table(tensor_pb2.TensorProto.DESCRIPTOR) == {
        "dtype": (1, "tf.DataType"),
        "tensor_shape": (2, "tf.TensorShapeProto"),
        "version_number": (3, "int32"),
        "tensor_content": (4, "bytes"),
        "half_val": (13, "repeated int32"),
        "float_val": (5, "repeated float"),
        "double_val": (6, "repeated double"),
        "int_val": (7, "repeated int32"),
        "string_val": (8, "repeated bytes"),
        "scomplex_val": (9, "repeated float"),
        "int64_val": (10, "repeated int64"),
        "bool_val": (11, "repeated bool"),
        "dcomplex_val": (12, "repeated double"),
        "uint32_val": (16, "repeated uint32"),
        "uint64_val": (17, "repeated uint64"),
    }
    for field in tensor_pb2.TensorProto.DESCRIPTOR.fields:
        if _is_repeated(field) and field.name != "string_val":
            assert _is_packed(field), field.name


def test_struct_fields() -> None:
    assert _field_table(struct_pb2.StructuredValue.DESCRIPTOR) == {
        "none_value": (1, "tf.NoneValue"),
        "float64_value": (11, "double"),
        "int64_value": (12, "sint64"),
        "string_value": (13, "string"),
        "bool_value": (14, "bool"),
        "tensor_shape_value": (31, "tf.TensorShapeProto"),
        "tensor_dtype_value": (32, "tf.DataType"),
        "tensor_spec_value": (33, "tf.TensorSpecProto"),
        "type_spec_value": (34, "tf.TypeSpecProto"),
        "bounded_tensor_spec_value": (35, "tf.BoundedTensorSpecProto"),
        "list_value": (51, "tf.ListValue"),
        "tuple_value": (52, "tf.TupleValue"),
        "dict_value": (53, "tf.DictValue"),
        "named_tuple_value": (54, "tf.NamedTupleValue"),
        "tensor_value": (55, "tf.TensorProto"),
        "numpy_value": (56, "tf.TensorProto"),
    }
    kind = struct_pb2.StructuredValue.DESCRIPTOR.oneofs_by_name["kind"]
    assert len(kind.fields) == 16
    assert _field_table(struct_pb2.NoneValue.DESCRIPTOR) == {}
    assert _field_table(struct_pb2.ListValue.DESCRIPTOR) == {
        "values": (1, "repeated tf.StructuredValue")
    }
    assert _field_table(struct_pb2.TupleValue.DESCRIPTOR) == {
        "values": (1, "repeated tf.StructuredValue")
    }
    assert _field_table(struct_pb2.DictValue.DESCRIPTOR) == {
        "fields": (1, "tf.DictValue.FieldsEntry")
    }
    assert _field_table(struct_pb2.PairValue.DESCRIPTOR) == {
        "key": (1, "string"),
        "value": (2, "tf.StructuredValue"),
    }
    assert _field_table(struct_pb2.NamedTupleValue.DESCRIPTOR) == {
        "name": (1, "string"),
        "values": (2, "repeated tf.PairValue"),
    }
    assert _field_table(struct_pb2.TensorSpecProto.DESCRIPTOR) == {
        "name": (1, "string"),
        "shape": (2, "tf.TensorShapeProto"),
        "dtype": (3, "tf.DataType"),
    }
    assert _field_table(struct_pb2.BoundedTensorSpecProto.DESCRIPTOR) == {
        "name": (1, "string"),
        "shape": (2, "tf.TensorShapeProto"),
        "dtype": (3, "tf.DataType"),
        "minimum": (4, "tf.TensorProto"),
        "maximum": (5, "tf.TensorProto"),
    }


# ---------------------------------------------------------------- Reverb side

SCHEMA_FIELDS: dict[Any, dict[str, tuple[int, str]]] = {
    schema_pb2.ChunkData: {
        "chunk_key": (1, "uint64"),
        "sequence_range": (2, "SequenceRange"),
        "deprecated_data": (3, "repeated tf.TensorProto"),
        "delta_encoded": (4, "bool"),
        "data": (5, "ChunkData.Data"),
        "data_tensors_len": (6, "int32"),
        "data_uncompressed_size": (7, "int64"),
    },
    schema_pb2.ChunkData.Data: {"tensors": (1, "repeated tf.TensorProto")},
    schema_pb2.SliceRange: {"offset": (1, "int32"), "length": (2, "int32")},
    schema_pb2.SequenceRange: {
        "episode_id": (1, "uint64"),
        "start": (2, "int32"),
        "end": (3, "int32"),
        "sparse": (4, "bool"),
    },
    schema_pb2.FlatTrajectory: {"columns": (1, "repeated FlatTrajectory.Column")},
    schema_pb2.FlatTrajectory.Column: {
        "chunk_slices": (1, "repeated FlatTrajectory.ChunkSlice"),
        "squeeze": (2, "bool"),
    },
    schema_pb2.FlatTrajectory.ChunkSlice: {
        "chunk_key": (1, "uint64"),
        "offset": (2, "int32"),
        "length": (3, "int32"),
        "index": (4, "int32"),
    },
    schema_pb2.PrioritizedItem: {
        "key": (1, "uint64"),
        "table": (2, "string"),
        "deprecated_chunk_keys": (3, "repeated uint64"),
        "deprecated_sequence_range": (4, "SliceRange"),
        "priority": (5, "double"),
        "times_sampled": (6, "int32"),
        "inserted_at": (7, "google.protobuf.Timestamp"),
        "flat_trajectory": (8, "FlatTrajectory"),
    },
    schema_pb2.KeyWithPriority: {"key": (1, "uint64"), "priority": (2, "double")},
    schema_pb2.SampleInfo: {
        "item": (1, "PrioritizedItem"),
        "probability": (2, "double"),
        "table_size": (3, "int64"),
        "rate_limited": (4, "bool"),
    },
    schema_pb2.TableInfo: {
        "sampler_options": (1, "KeyDistributionOptions"),
        "remover_options": (2, "KeyDistributionOptions"),
        "max_size": (3, "int64"),
        "max_times_sampled": (4, "int32"),
        "rate_limiter_info": (5, "RateLimiterInfo"),
        "signature": (6, "tf.StructuredValue"),
        "current_size": (7, "int64"),
        "name": (8, "string"),
        "num_episodes": (9, "int64"),
        "num_deleted_episodes": (10, "int64"),
        "num_unique_samples": (11, "int64"),
        "table_worker_time": (12, "TableWorkerTime"),
    },
    schema_pb2.RateLimiterCallStats: {"completed": (2, "int64")},
    schema_pb2.RateLimiterInfo: {
        "samples_per_insert": (1, "double"),
        "min_diff": (2, "double"),
        "max_diff": (3, "double"),
        "min_size_to_sample": (4, "int64"),
        "insert_stats": (5, "RateLimiterCallStats"),
        "sample_stats": (6, "RateLimiterCallStats"),
    },
    schema_pb2.TableWorkerTime: {
        "running_ms": (1, "int64"),
        "sampling_ms": (2, "int64"),
        "inserting_ms": (3, "int64"),
        "sleeping_ms": (4, "int64"),
        "waiting_for_sampling_ms": (5, "int64"),
        "waiting_for_inserts_ms": (6, "int64"),
    },
    schema_pb2.KeyDistributionOptions: {
        "fifo": (1, "bool"),
        "uniform": (2, "bool"),
        "prioritized": (3, "KeyDistributionOptions.Prioritized"),
        "heap": (4, "KeyDistributionOptions.Heap"),
        "lifo": (6, "bool"),
        "is_deterministic": (7, "bool"),
    },
    schema_pb2.KeyDistributionOptions.Prioritized: {"priority_exponent": (1, "double")},
    schema_pb2.KeyDistributionOptions.Heap: {"min_heap": (1, "bool")},
    schema_pb2.Uint128: {"high": (1, "uint64"), "low": (2, "uint64")},
    schema_pb2.Timeout: {"milliseconds": (1, "int64")},
    reverb_service_pb2.InitializeConnectionRequest: {
        "pid": (1, "int64"),
        "table_name": (2, "string"),
        "ownership_transferred": (3, "bool"),
    },
    reverb_service_pb2.InitializeConnectionResponse: {"address": (1, "int64")},
    reverb_service_pb2.CheckpointRequest: {},
    reverb_service_pb2.CheckpointResponse: {"checkpoint_path": (1, "string")},
    reverb_service_pb2.InsertStreamRequest: {
        "chunks": (1, "repeated ChunkData"),
        "items": (2, "repeated PrioritizedItem"),
        "keep_chunk_keys": (3, "repeated uint64"),
    },
    reverb_service_pb2.InsertStreamResponse: {"keys": (1, "repeated uint64")},
    reverb_service_pb2.MutatePrioritiesRequest: {
        "table": (1, "string"),
        "updates": (2, "repeated KeyWithPriority"),
        "delete_keys": (3, "repeated uint64"),
    },
    reverb_service_pb2.MutatePrioritiesResponse: {},
    reverb_service_pb2.ResetRequest: {"table": (1, "string")},
    reverb_service_pb2.ResetResponse: {},
    reverb_service_pb2.ServerInfoRequest: {},
    reverb_service_pb2.ServerInfoResponse: {
        "tables_state_id": (1, "Uint128"),
        "table_info": (2, "repeated TableInfo"),
    },
    reverb_service_pb2.SampleStreamRequest: {
        "table": (1, "string"),
        "num_samples": (2, "int64"),
        "rate_limiter_timeout": (3, "Timeout"),
    },
    reverb_service_pb2.SampleStreamResponse: {
        "entries": (1, "repeated SampleStreamResponse.SampleEntry"),
    },
    reverb_service_pb2.SampleStreamResponse.SampleEntry: {
        "info": (1, "SampleInfo"),
        "data": (2, "repeated ChunkData"),
        "end_of_sequence": (3, "bool"),
    },
    checkpoint_pb2.PriorityTableCheckpoint: {
        "table_name": (1, "string"),
        "deprecated_items": (2, "repeated PrioritizedItem"),
        "rate_limiter": (3, "RateLimiterCheckpoint"),
        "sampler": (4, "KeyDistributionOptions"),
        "remover": (5, "KeyDistributionOptions"),
        "max_size": (6, "int64"),
        "max_times_sampled": (7, "int32"),
        "num_deleted_episodes": (8, "int64"),
        "signature": (9, "tf.StructuredValue"),
        "num_unique_samples": (10, "int64"),
    },
    patterns_pb2.PatternNode: {
        "flat_source_index": (1, "int32"),
        "start": (2, "int32"),
        "stop": (3, "int32"),
        "step": (4, "int32"),
    },
    patterns_pb2.Condition: {
        "step_index": (1, "bool"),
        "steps_since_applied": (2, "bool"),
        "buffer_length": (3, "bool"),
        "is_end_episode": (4, "bool"),
        "flat_source_index": (9, "int32"),
        "eq": (5, "int32"),
        "ge": (6, "int32"),
        "mod_eq": (7, "Condition.ModuloEq"),
        "inverse": (8, "bool"),
    },
    patterns_pb2.Condition.ModuloEq: {"mod": (1, "int32"), "eq": (2, "int32")},
    patterns_pb2.Priority: {
        "constant_fn": (1, "Priority.ConstantPriorityFn"),
        "td_error": (2, "Priority.TDError"),
    },
    patterns_pb2.Priority.ConstantPriorityFn: {"value": (1, "double")},
    patterns_pb2.Priority.TDError: {
        "max_priority_weight": (1, "double"),
        "flat_source_index": (2, "int32"),
    },
    patterns_pb2.StructuredWriterConfig: {
        "flat": (1, "repeated PatternNode"),
        "pattern_structure": (2, "tf.StructuredValue"),
        "table": (3, "string"),
        "priority": (4, "Priority"),
        "conditions": (5, "repeated Condition"),
    },
    checkpoint_pb2.RateLimiterCheckpoint: {
        "samples_per_insert": (2, "double"),
        "min_diff": (3, "double"),
        "max_diff": (4, "double"),
        "min_size_to_sample": (5, "int64"),
        "sample_count": (6, "int64"),
        "insert_count": (7, "int64"),
        "delete_count": (8, "int64"),
    },
    reverb_config_pb2.ReverbServerConfig: {
        "tables": (1, "repeated PriorityTableCheckpoint"),
        "port": (2, "int32"),
    },
}


@pytest.mark.parametrize(
    "message_class", list(SCHEMA_FIELDS), ids=lambda cls: cls.DESCRIPTOR.full_name
)
def test_reverb_message_fields(message_class: Any) -> None:
    assert _field_table(message_class.DESCRIPTOR) == SCHEMA_FIELDS[message_class]


def test_every_reverb_message_is_covered() -> None:
    covered = {cls.DESCRIPTOR.full_name for cls in SCHEMA_FIELDS}
    declared = {
        descriptor.full_name
        for descriptor in _all_descriptors()
        if isinstance(descriptor, _descriptor.Descriptor)
        and descriptor.full_name.startswith("reverb_py.proto.")
    }
    assert declared == covered


def test_reserved_numbers_are_not_fields() -> None:
    def numbers(cls: Any) -> set[int]:
        return {field.number for field in cls.DESCRIPTOR.fields}

    assert numbers(schema_pb2.RateLimiterCallStats).isdisjoint({1, 3, 4, 5})
    assert 5 not in numbers(schema_pb2.KeyDistributionOptions)
    assert 4 not in numbers(reverb_service_pb2.SampleStreamRequest)
    assert 1 not in numbers(checkpoint_pb2.RateLimiterCheckpoint)


def test_field_options() -> None:
    chunk = schema_pb2.ChunkData.DESCRIPTOR
    assert chunk.fields_by_name["data"].GetOptions().lazy
    assert chunk.fields_by_name["deprecated_data"].GetOptions().deprecated
    item = schema_pb2.PrioritizedItem.DESCRIPTOR
    assert item.fields_by_name["deprecated_chunk_keys"].GetOptions().deprecated
    assert item.fields_by_name["deprecated_sequence_range"].GetOptions().deprecated
    distribution = schema_pb2.KeyDistributionOptions.DESCRIPTOR.oneofs_by_name["distribution"]
    assert [field.name for field in distribution.fields] == [
        "fifo",
        "uniform",
        "prioritized",
        "heap",
        "lifo",
    ]


def _streaming(method: Any) -> tuple[bool, bool]:
    # From the method's proto: protobuf 4.21's descriptors lack `client_streaming`.
    proto = descriptor_pb2.MethodDescriptorProto()
    method.CopyToProto(proto)
    return proto.client_streaming, proto.server_streaming


def test_service_declaration() -> None:
    service = reverb_service_pb2.DESCRIPTOR.services_by_name["ReverbService"]
    methods = {
        method.name: (
            *_streaming(method),
            _short(method.input_type.full_name),
            _short(method.output_type.full_name),
        )
        for method in service.methods
    }
    assert methods == {
        "Checkpoint": (False, False, "CheckpointRequest", "CheckpointResponse"),
        "InsertStream": (True, True, "InsertStreamRequest", "InsertStreamResponse"),
        "MutatePriorities": (False, False, "MutatePrioritiesRequest", "MutatePrioritiesResponse"),
        "Reset": (False, False, "ResetRequest", "ResetResponse"),
        "SampleStream": (True, True, "SampleStreamRequest", "SampleStreamResponse"),
        "ServerInfo": (False, False, "ServerInfoRequest", "ServerInfoResponse"),
        "InitializeConnection": (
            True,
            True,
            "InitializeConnectionRequest",
            "InitializeConnectionResponse",
        ),
    }


# ---------------------------------------------------------------- hand-encoded bytes


def _check(message: _message.Message, expected: bytes) -> None:
    """``message`` serialises to ``expected`` and ``expected`` parses back to it."""
    assert message.SerializeToString(deterministic=True) == expected
    parsed = type(message).FromString(expected)
    assert parsed == message


BYTE_CASES: list[tuple[str, _message.Message, str]] = [
    # TableInfo: name=8 (LEN) -> tag 0x42; max_size=3 (varint) -> 0x18.
    ("table_info_name", schema_pb2.TableInfo(name="t"), "42 01 74"),
    ("table_info_max_size", schema_pb2.TableInfo(max_size=5), "18 05"),
    (
        "table_info_fields_in_number_order",
        schema_pb2.TableInfo(
            name="ab",
            sampler_options=schema_pb2.KeyDistributionOptions(fifo=True),
            max_size=300,
            max_times_sampled=-1,
            current_size=2,
            num_episodes=3,
            num_deleted_episodes=4,
            num_unique_samples=5,
            table_worker_time=schema_pb2.TableWorkerTime(),
        ),
        # 1: sampler_options {fifo: true}; 3: 300; 4: int32 -1 as 10-byte varint;
        # 7, 8 (name), 9, 10, 11, 12 (empty message).
        "0a 02 08 01 18 ac 02 20 ff ff ff ff ff ff ff ff ff 01 38 02 42 02 61 62"
        " 48 03 50 04 58 05 62 00",
    ),
    (
        "table_info_signature",
        schema_pb2.TableInfo(signature=struct_pb2.StructuredValue(none_value={})),
        "32 02 0a 00",
    ),
    (
        "table_info_rate_limiter",
        schema_pb2.TableInfo(
            rate_limiter_info=schema_pb2.RateLimiterInfo(
                samples_per_insert=1.0,
                min_size_to_sample=2,
                insert_stats=schema_pb2.RateLimiterCallStats(completed=7),
            )
        ),
        # 5 { 1: double 1.0; 4: 2; 5 { 2: 7 } }
        "2a 0f 09 00 00 00 00 00 00 f0 3f 20 02 2a 02 10 07",
    ),
    # KeyDistributionOptions oneof: a false bool member is still present on the wire.
    ("kdo_fifo", schema_pb2.KeyDistributionOptions(fifo=True), "08 01"),
    ("kdo_fifo_false", schema_pb2.KeyDistributionOptions(fifo=False), "08 00"),
    ("kdo_uniform", schema_pb2.KeyDistributionOptions(uniform=True), "10 01"),
    (
        "kdo_prioritized",
        schema_pb2.KeyDistributionOptions(
            prioritized=schema_pb2.KeyDistributionOptions.Prioritized(priority_exponent=0.5)
        ),
        "1a 09 09 00 00 00 00 00 00 e0 3f",
    ),
    (
        "kdo_heap",
        schema_pb2.KeyDistributionOptions(
            heap=schema_pb2.KeyDistributionOptions.Heap(min_heap=True)
        ),
        "22 02 08 01",
    ),
    ("kdo_lifo", schema_pb2.KeyDistributionOptions(lifo=True), "30 01"),
    (
        "kdo_deterministic",
        schema_pb2.KeyDistributionOptions(uniform=True, is_deterministic=True),
        "10 01 38 01",
    ),
    # TensorProto (DT_INT32 = 3, shape [4], raw content).
    (
        "tensor_content",
        tensor_pb2.TensorProto(
            dtype=types_pb2.DT_INT32,
            tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=4)]
            ),
            tensor_content=b"\x01\x02",
        ),
        "08 03 12 04 12 02 08 04 22 02 01 02",
    ),
    ("tensor_version", tensor_pb2.TensorProto(version_number=2), "18 02"),
    ("tensor_float_val", tensor_pb2.TensorProto(float_val=[1.0]), "2a 04 00 00 80 3f"),
    (
        "tensor_double_val",
        tensor_pb2.TensorProto(double_val=[-2.0]),
        "32 08 00 00 00 00 00 00 00 c0",
    ),
    ("tensor_int_val", tensor_pb2.TensorProto(int_val=[1, 150]), "3a 03 01 96 01"),
    ("tensor_string_val", tensor_pb2.TensorProto(string_val=[b"a", b""]), "42 01 61 42 00"),
    (
        "tensor_scomplex_val",
        tensor_pb2.TensorProto(scomplex_val=[1.0, 0.0]),
        "4a 08 00 00 80 3f 00 00 00 00",
    ),
    ("tensor_int64_val", tensor_pb2.TensorProto(int64_val=[300]), "52 02 ac 02"),
    ("tensor_bool_val", tensor_pb2.TensorProto(bool_val=[True, False]), "5a 02 01 00"),
    (
        "tensor_dcomplex_val",
        tensor_pb2.TensorProto(dcomplex_val=[0.5]),
        "62 08 00 00 00 00 00 00 e0 3f",
    ),
    ("tensor_half_val", tensor_pb2.TensorProto(half_val=[0x3C00]), "6a 02 80 78"),
    ("tensor_uint32_val", tensor_pb2.TensorProto(uint32_val=[1]), "82 01 01 01"),
    ("tensor_uint64_val", tensor_pb2.TensorProto(uint64_val=[2]), "8a 01 01 02"),
    # TensorShapeProto: -1 (unknown dim) is a 10-byte varint; unknown_rank=3.
    (
        "shape_unknown_dim",
        tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=-1)]),
        "12 0b 08 ff ff ff ff ff ff ff ff ff 01",
    ),
    (
        "shape_dim_name",
        tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1, name="b")]
        ),
        "12 05 08 01 12 01 62",
    ),
    ("shape_unknown_rank", tensor_shape_pb2.TensorShapeProto(unknown_rank=True), "18 01"),
    # StructuredValue oneof members.
    ("sv_none", struct_pb2.StructuredValue(none_value={}), "0a 00"),
    (
        "sv_float64",
        struct_pb2.StructuredValue(float64_value=1.0),
        "59 00 00 00 00 00 00 f0 3f",
    ),
    ("sv_int64_zigzag_minus_one", struct_pb2.StructuredValue(int64_value=-1), "60 01"),
    ("sv_int64_zigzag_one", struct_pb2.StructuredValue(int64_value=1), "60 02"),
    ("sv_string", struct_pb2.StructuredValue(string_value="x"), "6a 01 78"),
    ("sv_bool", struct_pb2.StructuredValue(bool_value=True), "70 01"),
    (
        "sv_tensor_shape",
        struct_pb2.StructuredValue(
            tensor_shape_value=tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
        ),
        "fa 01 02 18 01",
    ),
    ("sv_dtype", struct_pb2.StructuredValue(tensor_dtype_value=types_pb2.DT_STRING), "80 02 07"),
    (
        "sv_tensor_spec",
        struct_pb2.StructuredValue(
            tensor_spec_value=struct_pb2.TensorSpecProto(
                name="x",
                shape=tensor_shape_pb2.TensorShapeProto(
                    dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)]
                ),
                dtype=types_pb2.DT_FLOAT,
            )
        ),
        "8a 02 0b 0a 01 78 12 04 12 02 08 02 18 01",
    ),
    (
        "sv_type_spec",
        struct_pb2.StructuredValue(
            type_spec_value=struct_pb2.TypeSpecProto(
                type_spec_class=struct_pb2.TypeSpecProto.RAGGED_TENSOR_SPEC,
                type_spec_class_name="R",
                num_flat_components=1,
            )
        ),
        "92 02 07 08 03 1a 01 52 20 01",
    ),
    (
        "sv_bounded_tensor_spec",
        struct_pb2.StructuredValue(
            bounded_tensor_spec_value=struct_pb2.BoundedTensorSpecProto(
                dtype=types_pb2.DT_INT8,
                minimum=tensor_pb2.TensorProto(dtype=types_pb2.DT_INT8),
                maximum=tensor_pb2.TensorProto(dtype=types_pb2.DT_INT8),
            )
        ),
        "9a 02 0a 18 06 22 02 08 06 2a 02 08 06",
    ),
    (
        "sv_list",
        struct_pb2.StructuredValue(
            list_value=struct_pb2.ListValue(values=[struct_pb2.StructuredValue(none_value={})])
        ),
        "9a 03 04 0a 02 0a 00",
    ),
    (
        "sv_tuple",
        struct_pb2.StructuredValue(
            tuple_value=struct_pb2.TupleValue(values=[struct_pb2.StructuredValue(bool_value=True)])
        ),
        "a2 03 04 0a 02 70 01",
    ),
    (
        "sv_dict",
        struct_pb2.StructuredValue(
            dict_value=struct_pb2.DictValue(fields={"a": struct_pb2.StructuredValue(none_value={})})
        ),
        # map entry {1: key "a", 2: value {none_value}}
        "aa 03 09 0a 07 0a 01 61 12 02 0a 00",
    ),
    (
        "sv_named_tuple",
        struct_pb2.StructuredValue(
            named_tuple_value=struct_pb2.NamedTupleValue(
                name="P",
                values=[
                    struct_pb2.PairValue(key="x", value=struct_pb2.StructuredValue(none_value={}))
                ],
            )
        ),
        "b2 03 0c 0a 01 50 12 07 0a 01 78 12 02 0a 00",
    ),
    (
        "sv_tensor_value",
        struct_pb2.StructuredValue(tensor_value=tensor_pb2.TensorProto(dtype=types_pb2.DT_BOOL)),
        "ba 03 02 08 0a",
    ),
    (
        "sv_numpy_value",
        struct_pb2.StructuredValue(numpy_value=tensor_pb2.TensorProto(dtype=types_pb2.DT_INT64)),
        "c2 03 02 08 09",
    ),
    # Chunks and items.
    (
        "chunk_data",
        schema_pb2.ChunkData(
            chunk_key=(1 << 64) - 1,
            sequence_range=schema_pb2.SequenceRange(episode_id=1, start=2, end=3, sparse=True),
            deprecated_data=[tensor_pb2.TensorProto()],
            delta_encoded=True,
            data=schema_pb2.ChunkData.Data(
                tensors=[tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT)]
            ),
            data_tensors_len=1,
            data_uncompressed_size=16,
        ),
        "08 ff ff ff ff ff ff ff ff ff 01 12 08 08 01 10 02 18 03 20 01 1a 00 20 01"
        " 2a 04 0a 02 08 01 30 01 38 10",
    ),
    ("slice_range", schema_pb2.SliceRange(offset=1, length=2), "08 01 10 02"),
    (
        "flat_trajectory",
        schema_pb2.FlatTrajectory(
            columns=[
                schema_pb2.FlatTrajectory.Column(
                    chunk_slices=[
                        schema_pb2.FlatTrajectory.ChunkSlice(
                            chunk_key=7, offset=1, length=2, index=3
                        )
                    ],
                    squeeze=True,
                )
            ]
        ),
        "0a 0c 0a 08 08 07 10 01 18 02 20 03 10 01",
    ),
    (
        "prioritized_item",
        schema_pb2.PrioritizedItem(
            key=1,
            table="t",
            deprecated_chunk_keys=[5, 6],
            deprecated_sequence_range=schema_pb2.SliceRange(length=1),
            priority=2.0,
            times_sampled=3,
            inserted_at=timestamp_pb2.Timestamp(seconds=1, nanos=2),
            flat_trajectory=schema_pb2.FlatTrajectory(),
        ),
        "08 01 12 01 74 1a 02 05 06 22 02 10 01 29 00 00 00 00 00 00 00 40 30 03"
        " 3a 04 08 01 10 02 42 00",
    ),
    (
        "key_with_priority",
        schema_pb2.KeyWithPriority(key=9, priority=1.0),
        "08 09 11 00 00 00 00 00 00 f0 3f",
    ),
    (
        "sample_info",
        schema_pb2.SampleInfo(
            item=schema_pb2.PrioritizedItem(key=1),
            probability=0.5,
            table_size=4,
            rate_limited=True,
        ),
        "0a 02 08 01 11 00 00 00 00 00 00 e0 3f 18 04 20 01",
    ),
    (
        "table_worker_time",
        schema_pb2.TableWorkerTime(
            running_ms=1,
            sampling_ms=2,
            inserting_ms=3,
            sleeping_ms=4,
            waiting_for_sampling_ms=5,
            waiting_for_inserts_ms=6,
        ),
        "08 01 10 02 18 03 20 04 28 05 30 06",
    ),
    (
        "rate_limiter_info_doubles",
        schema_pb2.RateLimiterInfo(min_diff=-1.0, max_diff=2.0, sample_stats={"completed": 1}),
        "11 00 00 00 00 00 00 f0 bf 19 00 00 00 00 00 00 00 40 32 02 10 01",
    ),
    ("uint128", schema_pb2.Uint128(high=1, low=2), "08 01 10 02"),
    ("timeout_never", schema_pb2.Timeout(milliseconds=-1), "08 ff ff ff ff ff ff ff ff ff 01"),
    # Service messages (repeated uint64 are packed, as proto3 does by default).
    (
        "insert_stream_request",
        reverb_service_pb2.InsertStreamRequest(
            chunks=[schema_pb2.ChunkData(chunk_key=1)],
            items=[schema_pb2.PrioritizedItem(key=2)],
            keep_chunk_keys=[1, 300],
        ),
        "0a 02 08 01 12 02 08 02 1a 03 01 ac 02",
    ),
    ("insert_stream_response", reverb_service_pb2.InsertStreamResponse(keys=[1, 2]), "0a 02 01 02"),
    (
        "mutate_priorities_request",
        reverb_service_pb2.MutatePrioritiesRequest(
            table="t", updates=[schema_pb2.KeyWithPriority(key=1)], delete_keys=[2]
        ),
        "0a 01 74 12 02 08 01 1a 01 02",
    ),
    ("reset_request", reverb_service_pb2.ResetRequest(table="t"), "0a 01 74"),
    ("checkpoint_request", reverb_service_pb2.CheckpointRequest(), ""),
    (
        "checkpoint_response",
        reverb_service_pb2.CheckpointResponse(checkpoint_path="/p"),
        "0a 02 2f 70",
    ),
    (
        "server_info_response",
        reverb_service_pb2.ServerInfoResponse(
            tables_state_id=schema_pb2.Uint128(low=1),
            table_info=[schema_pb2.TableInfo(name="t")],
        ),
        "0a 02 10 01 12 03 42 01 74",
    ),
    (
        "sample_stream_request",
        reverb_service_pb2.SampleStreamRequest(
            table="t", num_samples=2, rate_limiter_timeout=schema_pb2.Timeout(milliseconds=5)
        ),
        "0a 01 74 10 02 1a 02 08 05",
    ),
    (
        "sample_stream_response",
        reverb_service_pb2.SampleStreamResponse(
            entries=[
                reverb_service_pb2.SampleStreamResponse.SampleEntry(
                    info=schema_pb2.SampleInfo(table_size=1),
                    data=[schema_pb2.ChunkData(chunk_key=3)],
                    end_of_sequence=True,
                )
            ]
        ),
        "0a 0a 0a 02 18 01 12 02 08 03 18 01",
    ),
    (
        "initialize_connection_request",
        reverb_service_pb2.InitializeConnectionRequest(
            pid=42, table_name="t", ownership_transferred=True
        ),
        "08 2a 12 01 74 18 01",
    ),
    (
        "initialize_connection_response",
        reverb_service_pb2.InitializeConnectionResponse(address=0),
        "",
    ),
    # Checkpoint records.
    (
        "priority_table_checkpoint",
        checkpoint_pb2.PriorityTableCheckpoint(
            table_name="t",
            deprecated_items=[schema_pb2.PrioritizedItem(key=1)],
            rate_limiter=checkpoint_pb2.RateLimiterCheckpoint(),
            sampler=schema_pb2.KeyDistributionOptions(uniform=True),
            remover=schema_pb2.KeyDistributionOptions(fifo=True),
            max_size=10,
            max_times_sampled=1,
            num_deleted_episodes=2,
            signature=struct_pb2.StructuredValue(none_value={}),
            num_unique_samples=3,
        ),
        "0a 01 74 12 02 08 01 1a 00 22 02 10 01 2a 02 08 01 30 0a 38 01 40 02 4a 02 0a 00 50 03",
    ),
    (
        "rate_limiter_checkpoint",
        checkpoint_pb2.RateLimiterCheckpoint(
            samples_per_insert=1.0,
            min_diff=-1.0,
            max_diff=1.0,
            min_size_to_sample=1,
            sample_count=2,
            insert_count=3,
            delete_count=4,
        ),
        "11 00 00 00 00 00 00 f0 3f 19 00 00 00 00 00 00 f0 bf 21 00 00 00 00 00 00 f0 3f"
        " 28 01 30 02 38 03 40 04",
    ),
    (
        "structured_writer_config",
        patterns_pb2.StructuredWriterConfig(
            flat=[patterns_pb2.PatternNode(flat_source_index=1, start=-2, step=2)],
            table="t",
            priority=patterns_pb2.Priority(constant_fn={"value": 1.0}),
            conditions=[
                patterns_pb2.Condition(step_index=True, mod_eq={"mod": 3, "eq": 1}, inverse=True)
            ],
        ),
        "0a 0f 08 01 10 fe ff ff ff ff ff ff ff ff 01 20 02 1a 01 74"
        " 22 0b 0a 09 09 00 00 00 00 00 00 f0 3f 2a 0a 08 01 3a 04 08 03 10 01 40 01",
    ),
    (
        "td_error_priority",
        patterns_pb2.Priority(td_error={"max_priority_weight": 0.5, "flat_source_index": 3}),
        "12 0b 09 00 00 00 00 00 00 e0 3f 10 03",
    ),
    ("data_condition", patterns_pb2.Condition(flat_source_index=2, eq=1), "28 01 48 02"),
]


@pytest.mark.parametrize(
    ("message", "expected"),
    [(message, expected) for _, message, expected in BYTE_CASES],
    ids=[name for name, _, _ in BYTE_CASES],
)
def test_hand_encoded_bytes(message: _message.Message, expected: str) -> None:
    _check(message, bytes.fromhex(expected))


def test_hand_encoded_bytes_use_helpers_consistently() -> None:
    # The same TableInfo as above, built with the helpers instead of literal hex.
    expected = (
        length_delimited(1, tag(1, 0) + varint(1))
        + tag(3, 0)
        + varint(300)
        + tag(4, 0)
        + varint(-1)
        + tag(7, 0)
        + varint(2)
        + length_delimited(8, b"ab")
        + tag(9, 0)
        + varint(3)
        + tag(10, 0)
        + varint(4)
        + tag(11, 0)
        + varint(5)
        + length_delimited(12, b"")
    )
    cases = {name: bytes.fromhex(hex_) for name, _, hex_ in BYTE_CASES}
    assert cases["table_info_fields_in_number_order"] == expected
    assert cases["kdo_prioritized"] == length_delimited(3, tag(1, 1) + f64(0.5))


def test_unpacked_repeated_scalars_also_parse() -> None:
    # A peer writing repeated scalars unpacked (one tag per element) must still be read.
    unpacked = tag(3, 0) + varint(1) + tag(3, 0) + varint(300)
    request = reverb_service_pb2.InsertStreamRequest.FromString(unpacked)
    assert list(request.keep_chunk_keys) == [1, 300]


def test_unknown_and_reserved_fields_survive_a_round_trip() -> None:
    # Field 5 is reserved in KeyDistributionOptions (Reverb's removed `lifo` slot) and
    # 14 (resource_handle_val) is not declared in TensorProto: both are kept as unknown.
    data = bytes.fromhex("08 01 28 01")
    options = schema_pb2.KeyDistributionOptions.FromString(data)
    assert options.fifo
    assert options.SerializeToString() == data
    tensor_data = bytes.fromhex("08 01") + length_delimited(14, b"\x0a\x01d")
    tensor = tensor_pb2.TensorProto.FromString(tensor_data)
    assert tensor.SerializeToString() == tensor_data


def test_oneof_reports_the_member_set() -> None:
    options = schema_pb2.KeyDistributionOptions.FromString(bytes.fromhex("30 01"))
    assert options.WhichOneof("distribution") == "lifo"
    value = struct_pb2.StructuredValue.FromString(bytes.fromhex("b2 03 00"))
    assert value.WhichOneof("kind") == "named_tuple_value"


def test_committed_modules_are_what_make_protos_generates(tmp_path: pathlib.Path) -> None:
    """`make protos` (protoc, then protos/strip_version_gate.py) reproduces the committed
    modules byte for byte, and none of them gates the protobuf runtime version."""
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (dev extra)")
    root = pathlib.Path(__file__).resolve().parents[2]
    protos = root / "protos"
    # Names as protoc registers them (relative to the include directory), as `make protos`.
    sources = sorted(str(p.relative_to(protos)) for p in protos.rglob("*.proto"))
    bundled = pathlib.Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    outputs = [f"--python_out={tmp_path}", f"--pyi_out={tmp_path}"]
    assert protoc.main(["protoc", f"-I{protos}", f"-I{bundled}", *outputs, *sources]) == 0
    strip_gate = runpy.run_path(str(root / "protos" / "strip_version_gate.py"))["strip"]
    committed = sorted((root / "reverb_py" / "_proto").glob("*_pb2.py*"))
    assert committed
    for path in committed:
        generated = (tmp_path / "reverb_py" / "_proto" / path.name).read_text(encoding="utf-8")
        if path.suffix == ".py":
            generated = strip_gate(generated)
            assert "ValidateProtobufRuntimeVersion" not in generated
            assert strip_gate(generated) == generated
        assert path.read_text(encoding="utf-8") == generated, path.name
