from reverb_py._proto import schema_pb2 as _schema_pb2
from reverb_py._proto import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PriorityTableCheckpoint(_message.Message):
    __slots__ = ("table_name", "max_size", "max_times_sampled", "rate_limiter", "sampler", "remover", "num_deleted_episodes", "signature", "num_unique_samples", "deprecated_items")
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMES_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITER_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_FIELD_NUMBER: _ClassVar[int]
    REMOVER_FIELD_NUMBER: _ClassVar[int]
    NUM_DELETED_EPISODES_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    NUM_UNIQUE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    DEPRECATED_ITEMS_FIELD_NUMBER: _ClassVar[int]
    table_name: str
    max_size: int
    max_times_sampled: int
    rate_limiter: RateLimiterCheckpoint
    sampler: _schema_pb2.KeyDistributionOptions
    remover: _schema_pb2.KeyDistributionOptions
    num_deleted_episodes: int
    signature: _struct_pb2.StructuredValue
    num_unique_samples: int
    deprecated_items: _containers.RepeatedCompositeFieldContainer[_schema_pb2.PrioritizedItem]
    def __init__(self, table_name: _Optional[str] = ..., max_size: _Optional[int] = ..., max_times_sampled: _Optional[int] = ..., rate_limiter: _Optional[_Union[RateLimiterCheckpoint, _Mapping]] = ..., sampler: _Optional[_Union[_schema_pb2.KeyDistributionOptions, _Mapping]] = ..., remover: _Optional[_Union[_schema_pb2.KeyDistributionOptions, _Mapping]] = ..., num_deleted_episodes: _Optional[int] = ..., signature: _Optional[_Union[_struct_pb2.StructuredValue, _Mapping]] = ..., num_unique_samples: _Optional[int] = ..., deprecated_items: _Optional[_Iterable[_Union[_schema_pb2.PrioritizedItem, _Mapping]]] = ...) -> None: ...

class RateLimiterCheckpoint(_message.Message):
    __slots__ = ("samples_per_insert", "min_diff", "max_diff", "min_size_to_sample", "sample_count", "insert_count", "delete_count")
    SAMPLES_PER_INSERT_FIELD_NUMBER: _ClassVar[int]
    MIN_DIFF_FIELD_NUMBER: _ClassVar[int]
    MAX_DIFF_FIELD_NUMBER: _ClassVar[int]
    MIN_SIZE_TO_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    INSERT_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELETE_COUNT_FIELD_NUMBER: _ClassVar[int]
    samples_per_insert: float
    min_diff: float
    max_diff: float
    min_size_to_sample: int
    sample_count: int
    insert_count: int
    delete_count: int
    def __init__(self, samples_per_insert: _Optional[float] = ..., min_diff: _Optional[float] = ..., max_diff: _Optional[float] = ..., min_size_to_sample: _Optional[int] = ..., sample_count: _Optional[int] = ..., insert_count: _Optional[int] = ..., delete_count: _Optional[int] = ...) -> None: ...
