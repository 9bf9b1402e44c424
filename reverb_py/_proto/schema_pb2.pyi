import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from reverb_py._proto import struct_pb2 as _struct_pb2
from reverb_py._proto import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChunkData(_message.Message):
    __slots__ = ("chunk_key", "sequence_range", "data", "data_tensors_len", "data_uncompressed_size", "delta_encoded", "deprecated_data")
    class Data(_message.Message):
        __slots__ = ("tensors",)
        TENSORS_FIELD_NUMBER: _ClassVar[int]
        tensors: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.TensorProto]
        def __init__(self, tensors: _Optional[_Iterable[_Union[_tensor_pb2.TensorProto, _Mapping]]] = ...) -> None: ...
    CHUNK_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_RANGE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DATA_TENSORS_LEN_FIELD_NUMBER: _ClassVar[int]
    DATA_UNCOMPRESSED_SIZE_FIELD_NUMBER: _ClassVar[int]
    DELTA_ENCODED_FIELD_NUMBER: _ClassVar[int]
    DEPRECATED_DATA_FIELD_NUMBER: _ClassVar[int]
    chunk_key: int
    sequence_range: SequenceRange
    data: ChunkData.Data
    data_tensors_len: int
    data_uncompressed_size: int
    delta_encoded: bool
    deprecated_data: _containers.RepeatedCompositeFieldContainer[_tensor_pb2.TensorProto]
    def __init__(self, chunk_key: _Optional[int] = ..., sequence_range: _Optional[_Union[SequenceRange, _Mapping]] = ..., data: _Optional[_Union[ChunkData.Data, _Mapping]] = ..., data_tensors_len: _Optional[int] = ..., data_uncompressed_size: _Optional[int] = ..., delta_encoded: _Optional[bool] = ..., deprecated_data: _Optional[_Iterable[_Union[_tensor_pb2.TensorProto, _Mapping]]] = ...) -> None: ...

class SliceRange(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class SequenceRange(_message.Message):
    __slots__ = ("episode_id", "start", "end", "sparse")
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    episode_id: int
    start: int
    end: int
    sparse: bool
    def __init__(self, episode_id: _Optional[int] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., sparse: _Optional[bool] = ...) -> None: ...

class FlatTrajectory(_message.Message):
    __slots__ = ("columns",)
    class ChunkSlice(_message.Message):
        __slots__ = ("chunk_key", "offset", "length", "index")
        CHUNK_KEY_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        LENGTH_FIELD_NUMBER: _ClassVar[int]
        INDEX_FIELD_NUMBER: _ClassVar[int]
        chunk_key: int
        offset: int
        length: int
        index: int
        def __init__(self, chunk_key: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...
    class Column(_message.Message):
        __slots__ = ("chunk_slices", "squeeze")
        CHUNK_SLICES_FIELD_NUMBER: _ClassVar[int]
        SQUEEZE_FIELD_NUMBER: _ClassVar[int]
        chunk_slices: _containers.RepeatedCompositeFieldContainer[FlatTrajectory.ChunkSlice]
        squeeze: bool
        def __init__(self, chunk_slices: _Optional[_Iterable[_Union[FlatTrajectory.ChunkSlice, _Mapping]]] = ..., squeeze: _Optional[bool] = ...) -> None: ...
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedCompositeFieldContainer[FlatTrajectory.Column]
    def __init__(self, columns: _Optional[_Iterable[_Union[FlatTrajectory.Column, _Mapping]]] = ...) -> None: ...

class PrioritizedItem(_message.Message):
    __slots__ = ("key", "table", "priority", "times_sampled", "inserted_at", "flat_trajectory", "deprecated_chunk_keys", "deprecated_sequence_range")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TIMES_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    INSERTED_AT_FIELD_NUMBER: _ClassVar[int]
    FLAT_TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    DEPRECATED_CHUNK_KEYS_FIELD_NUMBER: _ClassVar[int]
    DEPRECATED_SEQUENCE_RANGE_FIELD_NUMBER: _ClassVar[int]
    key: int
    table: str
    priority: float
    times_sampled: int
    inserted_at: _timestamp_pb2.Timestamp
    flat_trajectory: FlatTrajectory
    deprecated_chunk_keys: _containers.RepeatedScalarFieldContainer[int]
    deprecated_sequence_range: SliceRange
    def __init__(self, key: _Optional[int] = ..., table: _Optional[str] = ..., priority: _Optional[float] = ..., times_sampled: _Optional[int] = ..., inserted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., flat_trajectory: _Optional[_Union[FlatTrajectory, _Mapping]] = ..., deprecated_chunk_keys: _Optional[_Iterable[int]] = ..., deprecated_sequence_range: _Optional[_Union[SliceRange, _Mapping]] = ...) -> None: ...

class KeyWithPriority(_message.Message):
    __slots__ = ("key", "priority")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    key: int
    priority: float
    def __init__(self, key: _Optional[int] = ..., priority: _Optional[float] = ...) -> None: ...

class SampleInfo(_message.Message):
    __slots__ = ("item", "probability", "table_size", "rate_limited")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    TABLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    item: PrioritizedItem
    probability: float
    table_size: int
    rate_limited: bool
    def __init__(self, item: _Optional[_Union[PrioritizedItem, _Mapping]] = ..., probability: _Optional[float] = ..., table_size: _Optional[int] = ..., rate_limited: _Optional[bool] = ...) -> None: ...

class TableInfo(_message.Message):
    __slots__ = ("name", "sampler_options", "remover_options", "max_size", "max_times_sampled", "rate_limiter_info", "signature", "current_size", "num_episodes", "num_deleted_episodes", "num_unique_samples", "table_worker_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    REMOVER_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_TIMES_SAMPLED_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITER_INFO_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_EPISODES_FIELD_NUMBER: _ClassVar[int]
    NUM_DELETED_EPISODES_FIELD_NUMBER: _ClassVar[int]
    NUM_UNIQUE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TABLE_WORKER_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    sampler_options: KeyDistributionOptions
    remover_options: KeyDistributionOptions
    max_size: int
    max_times_sampled: int
    rate_limiter_info: RateLimiterInfo
    signature: _struct_pb2.StructuredValue
    current_size: int
    num_episodes: int
    num_deleted_episodes: int
    num_unique_samples: int
    table_worker_time: TableWorkerTime
    def __init__(self, name: _Optional[str] = ..., sampler_options: _Optional[_Union[KeyDistributionOptions, _Mapping]] = ..., remover_options: _Optional[_Union[KeyDistributionOptions, _Mapping]] = ..., max_size: _Optional[int] = ..., max_times_sampled: _Optional[int] = ..., rate_limiter_info: _Optional[_Union[RateLimiterInfo, _Mapping]] = ..., signature: _Optional[_Union[_struct_pb2.StructuredValue, _Mapping]] = ..., current_size: _Optional[int] = ..., num_episodes: _Optional[int] = ..., num_deleted_episodes: _Optional[int] = ..., num_unique_samples: _Optional[int] = ..., table_worker_time: _Optional[_Union[TableWorkerTime, _Mapping]] = ...) -> None: ...

class RateLimiterCallStats(_message.Message):
    __slots__ = ("completed",)
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    completed: int
    def __init__(self, completed: _Optional[int] = ...) -> None: ...

class RateLimiterInfo(_message.Message):
    __slots__ = ("samples_per_insert", "min_diff", "max_diff", "min_size_to_sample", "insert_stats", "sample_stats")
    SAMPLES_PER_INSERT_FIELD_NUMBER: _ClassVar[int]
    MIN_DIFF_FIELD_NUMBER: _ClassVar[int]
    MAX_DIFF_FIELD_NUMBER: _ClassVar[int]
    MIN_SIZE_TO_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    INSERT_STATS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_STATS_FIELD_NUMBER: _ClassVar[int]
    samples_per_insert: float
    min_diff: float
    max_diff: float
    min_size_to_sample: int
    insert_stats: RateLimiterCallStats
    sample_stats: RateLimiterCallStats
    def __init__(self, samples_per_insert: _Optional[float] = ..., min_diff: _Optional[float] = ..., max_diff: _Optional[float] = ..., min_size_to_sample: _Optional[int] = ..., insert_stats: _Optional[_Union[RateLimiterCallStats, _Mapping]] = ..., sample_stats: _Optional[_Union[RateLimiterCallStats, _Mapping]] = ...) -> None: ...

class TableWorkerTime(_message.Message):
    __slots__ = ("running_ms", "sampling_ms", "inserting_ms", "sleeping_ms", "waiting_for_sampling_ms", "waiting_for_inserts_ms")
    RUNNING_MS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_MS_FIELD_NUMBER: _ClassVar[int]
    INSERTING_MS_FIELD_NUMBER: _ClassVar[int]
    SLEEPING_MS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_SAMPLING_MS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_INSERTS_MS_FIELD_NUMBER: _ClassVar[int]
    running_ms: int
    sampling_ms: int
    inserting_ms: int
    sleeping_ms: int
    waiting_for_sampling_ms: int
    waiting_for_inserts_ms: int
    def __init__(self, running_ms: _Optional[int] = ..., sampling_ms: _Optional[int] = ..., inserting_ms: _Optional[int] = ..., sleeping_ms: _Optional[int] = ..., waiting_for_sampling_ms: _Optional[int] = ..., waiting_for_inserts_ms: _Optional[int] = ...) -> None: ...

class KeyDistributionOptions(_message.Message):
    __slots__ = ("fifo", "uniform", "prioritized", "heap", "lifo", "is_deterministic")
    class Prioritized(_message.Message):
        __slots__ = ("priority_exponent",)
        PRIORITY_EXPONENT_FIELD_NUMBER: _ClassVar[int]
        priority_exponent: float
        def __init__(self, priority_exponent: _Optional[float] = ...) -> None: ...
    class Heap(_message.Message):
        __slots__ = ("min_heap",)
        MIN_HEAP_FIELD_NUMBER: _ClassVar[int]
        min_heap: bool
        def __init__(self, min_heap: _Optional[bool] = ...) -> None: ...
    FIFO_FIELD_NUMBER: _ClassVar[int]
    UNIFORM_FIELD_NUMBER: _ClassVar[int]
    PRIORITIZED_FIELD_NUMBER: _ClassVar[int]
    HEAP_FIELD_NUMBER: _ClassVar[int]
    LIFO_FIELD_NUMBER: _ClassVar[int]
    IS_DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    fifo: bool
    uniform: bool
    prioritized: KeyDistributionOptions.Prioritized
    heap: KeyDistributionOptions.Heap
    lifo: bool
    is_deterministic: bool
    def __init__(self, fifo: _Optional[bool] = ..., uniform: _Optional[bool] = ..., prioritized: _Optional[_Union[KeyDistributionOptions.Prioritized, _Mapping]] = ..., heap: _Optional[_Union[KeyDistributionOptions.Heap, _Mapping]] = ..., lifo: _Optional[bool] = ..., is_deterministic: _Optional[bool] = ...) -> None: ...

class Uint128(_message.Message):
    __slots__ = ("high", "low")
    HIGH_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    high: int
    low: int
    def __init__(self, high: _Optional[int] = ..., low: _Optional[int] = ...) -> None: ...

class Timeout(_message.Message):
    __slots__ = ("milliseconds",)
    MILLISECONDS_FIELD_NUMBER: _ClassVar[int]
    milliseconds: int
    def __init__(self, milliseconds: _Optional[int] = ...) -> None: ...
