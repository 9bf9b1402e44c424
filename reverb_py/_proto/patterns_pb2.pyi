from reverb_py._proto import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PatternNode(_message.Message):
    __slots__ = ("flat_source_index", "start", "stop", "step")
    FLAT_SOURCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    flat_source_index: int
    start: int
    stop: int
    step: int
    def __init__(self, flat_source_index: _Optional[int] = ..., start: _Optional[int] = ..., stop: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("step_index", "steps_since_applied", "buffer_length", "is_end_episode", "flat_source_index", "eq", "ge", "mod_eq", "inverse")
    class ModuloEq(_message.Message):
        __slots__ = ("mod", "eq")
        MOD_FIELD_NUMBER: _ClassVar[int]
        EQ_FIELD_NUMBER: _ClassVar[int]
        mod: int
        eq: int
        def __init__(self, mod: _Optional[int] = ..., eq: _Optional[int] = ...) -> None: ...
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    STEPS_SINCE_APPLIED_FIELD_NUMBER: _ClassVar[int]
    BUFFER_LENGTH_FIELD_NUMBER: _ClassVar[int]
    IS_END_EPISODE_FIELD_NUMBER: _ClassVar[int]
    FLAT_SOURCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    EQ_FIELD_NUMBER: _ClassVar[int]
    GE_FIELD_NUMBER: _ClassVar[int]
    MOD_EQ_FIELD_NUMBER: _ClassVar[int]
    INVERSE_FIELD_NUMBER: _ClassVar[int]
    step_index: bool
    steps_since_applied: bool
    buffer_length: bool
    is_end_episode: bool
    flat_source_index: int
    eq: int
    ge: int
    mod_eq: Condition.ModuloEq
    inverse: bool
    def __init__(self, step_index: _Optional[bool] = ..., steps_since_applied: _Optional[bool] = ..., buffer_length: _Optional[bool] = ..., is_end_episode: _Optional[bool] = ..., flat_source_index: _Optional[int] = ..., eq: _Optional[int] = ..., ge: _Optional[int] = ..., mod_eq: _Optional[_Union[Condition.ModuloEq, _Mapping]] = ..., inverse: _Optional[bool] = ...) -> None: ...

class Priority(_message.Message):
    __slots__ = ("constant_fn", "td_error")
    class ConstantPriorityFn(_message.Message):
        __slots__ = ("value",)
        VALUE_FIELD_NUMBER: _ClassVar[int]
        value: float
        def __init__(self, value: _Optional[float] = ...) -> None: ...
    class TDError(_message.Message):
        __slots__ = ("max_priority_weight", "flat_source_index")
        MAX_PRIORITY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
        FLAT_SOURCE_INDEX_FIELD_NUMBER: _ClassVar[int]
        max_priority_weight: float
        flat_source_index: int
        def __init__(self, max_priority_weight: _Optional[float] = ..., flat_source_index: _Optional[int] = ...) -> None: ...
    CONSTANT_FN_FIELD_NUMBER: _ClassVar[int]
    TD_ERROR_FIELD_NUMBER: _ClassVar[int]
    constant_fn: Priority.ConstantPriorityFn
    td_error: Priority.TDError
    def __init__(self, constant_fn: _Optional[_Union[Priority.ConstantPriorityFn, _Mapping]] = ..., td_error: _Optional[_Union[Priority.TDError, _Mapping]] = ...) -> None: ...

class StructuredWriterConfig(_message.Message):
    __slots__ = ("flat", "pattern_structure", "table", "priority", "conditions")
    FLAT_FIELD_NUMBER: _ClassVar[int]
    PATTERN_STRUCTURE_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CONDITIONS_FIELD_NUMBER: _ClassVar[int]
    flat: _containers.RepeatedCompositeFieldContainer[PatternNode]
    pattern_structure: _struct_pb2.StructuredValue
    table: str
    priority: Priority
    conditions: _containers.RepeatedCompositeFieldContainer[Condition]
    def __init__(self, flat: _Optional[_Iterable[_Union[PatternNode, _Mapping]]] = ..., pattern_structure: _Optional[_Union[_struct_pb2.StructuredValue, _Mapping]] = ..., table: _Optional[str] = ..., priority: _Optional[_Union[Priority, _Mapping]] = ..., conditions: _Optional[_Iterable[_Union[Condition, _Mapping]]] = ...) -> None: ...
