from reverb_py._proto import schema_pb2 as _schema_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InitializeConnectionRequest(_message.Message):
    __slots__ = ("pid", "table_name", "ownership_transferred")
    PID_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    OWNERSHIP_TRANSFERRED_FIELD_NUMBER: _ClassVar[int]
    pid: int
    table_name: str
    ownership_transferred: bool
    def __init__(self, pid: _Optional[int] = ..., table_name: _Optional[str] = ..., ownership_transferred: _Optional[bool] = ...) -> None: ...

class InitializeConnectionResponse(_message.Message):
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: int
    def __init__(self, address: _Optional[int] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("checkpoint_path",)
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    checkpoint_path: str
    def __init__(self, checkpoint_path: _Optional[str] = ...) -> None: ...

class InsertStreamRequest(_message.Message):
    __slots__ = ("chunks", "items", "keep_chunk_keys")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    KEEP_CHUNK_KEYS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[_schema_pb2.ChunkData]
    items: _containers.RepeatedCompositeFieldContainer[_schema_pb2.PrioritizedItem]
    keep_chunk_keys: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, chunks: _Optional[_Iterable[_Union[_schema_pb2.ChunkData, _Mapping]]] = ..., items: _Optional[_Iterable[_Union[_schema_pb2.PrioritizedItem, _Mapping]]] = ..., keep_chunk_keys: _Optional[_Iterable[int]] = ...) -> None: ...

class InsertStreamResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, keys: _Optional[_Iterable[int]] = ...) -> None: ...

class MutatePrioritiesRequest(_message.Message):
    __slots__ = ("table", "updates", "delete_keys")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    DELETE_KEYS_FIELD_NUMBER: _ClassVar[int]
    table: str
    updates: _containers.RepeatedCompositeFieldContainer[_schema_pb2.KeyWithPriority]
    delete_keys: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, table: _Optional[str] = ..., updates: _Optional[_Iterable[_Union[_schema_pb2.KeyWithPriority, _Mapping]]] = ..., delete_keys: _Optional[_Iterable[int]] = ...) -> None: ...

class MutatePrioritiesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetRequest(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: str
    def __init__(self, table: _Optional[str] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerInfoResponse(_message.Message):
    __slots__ = ("tables_state_id", "table_info")
    TABLES_STATE_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_INFO_FIELD_NUMBER: _ClassVar[int]
    tables_state_id: _schema_pb2.Uint128
    table_info: _containers.RepeatedCompositeFieldContainer[_schema_pb2.TableInfo]
    def __init__(self, tables_state_id: _Optional[_Union[_schema_pb2.Uint128, _Mapping]] = ..., table_info: _Optional[_Iterable[_Union[_schema_pb2.TableInfo, _Mapping]]] = ...) -> None: ...

class SampleStreamRequest(_message.Message):
    __slots__ = ("table", "num_samples", "rate_limiter_timeout")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITER_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    table: str
    num_samples: int
    rate_limiter_timeout: _schema_pb2.Timeout
    def __init__(self, table: _Optional[str] = ..., num_samples: _Optional[int] = ..., rate_limiter_timeout: _Optional[_Union[_schema_pb2.Timeout, _Mapping]] = ...) -> None: ...

class SampleStreamResponse(_message.Message):
    __slots__ = ("entries",)
    class SampleEntry(_message.Message):
        __slots__ = ("info", "data", "end_of_sequence")
        INFO_FIELD_NUMBER: _ClassVar[int]
        DATA_FIELD_NUMBER: _ClassVar[int]
        END_OF_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
        info: _schema_pb2.SampleInfo
        data: _containers.RepeatedCompositeFieldContainer[_schema_pb2.ChunkData]
        end_of_sequence: bool
        def __init__(self, info: _Optional[_Union[_schema_pb2.SampleInfo, _Mapping]] = ..., data: _Optional[_Iterable[_Union[_schema_pb2.ChunkData, _Mapping]]] = ..., end_of_sequence: _Optional[bool] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[SampleStreamResponse.SampleEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[SampleStreamResponse.SampleEntry, _Mapping]]] = ...) -> None: ...
