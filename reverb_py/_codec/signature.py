"""Table signatures: nests of specs ⇄ ``StructuredValue`` protos, and flattening.

Encoding (what TensorFlow's structure coder writes, which Reverb stores in
``TableInfo.signature``):

==============================  =============================================
Python                          ``StructuredValue`` kind
==============================  =============================================
``None``                        ``none_value``
``dict`` / other ``Mapping``    ``dict_value`` (keys must be ``str``)
``tuple``                       ``tuple_value``
``list``                        ``list_value``
namedtuple                      ``named_tuple_value`` (class name + fields)
:class:`TensorSpec`             ``tensor_spec_value``
:class:`BoundedTensorSpec`      ``bounded_tensor_spec_value``
``tf.TensorSpec``-like          converted with :meth:`TensorSpec.from_spec`
==============================  =============================================

Shapes: an unknown dim is ``-1``, an unknown rank sets ``unknown_rank``. Bounds of a
bounded spec are ``TensorProto``s of the spec's dtype in the bound's own shape, with the
elements as little-endian raw bytes in ``tensor_content`` (strings in ``string_val``).
Decoding reads them with :func:`reverb_py._codec.tensor.decode_plain_tensor`, so the
typed ``*_val`` fields are accepted too (TensorFlow writes size-1 bounds that way).

Decoding gives ``dict``s with sorted keys, rebuilds namedtuples as
``collections.namedtuple(name, fields)`` classes (one class per name and field list),
and turns an empty ``StructuredValue`` (no kind set) into ``None``.
"""

from __future__ import annotations

import collections
import functools
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from reverb_py._codec import dtypes as _dtypes
from reverb_py._codec.tensor import decode_plain_tensor, string_bytes
from reverb_py._proto import reverb_service_pb2, struct_pb2, tensor_pb2, tensor_shape_pb2
from reverb_py.tensor_spec import BoundedTensorSpec, Shape, TensorSpec

__all__ = [
    "check_sendable",
    "decode_signature",
    "decode_signature_for_caller",
    "encode_signature",
    "flatten_signature",
]


def _is_namedtuple(value: object) -> bool:
    fields = getattr(type(value), "_fields", None)
    return (
        isinstance(value, tuple)
        and isinstance(fields, tuple)
        and all(isinstance(field, str) for field in fields)
    )


def _is_spec_like(value: object) -> bool:
    """Whether ``value`` looks like a ``tf.TensorSpec`` (not like an array or tensor)."""
    return (
        hasattr(value, "shape")
        and hasattr(value, "dtype")
        and hasattr(value, "name")
        and not hasattr(value, "__array__")
    )


def _unsupported(value: object) -> ValueError:
    return ValueError(f"Unsupported signature spec: {value}")


def _as_spec(value: object) -> TensorSpec:
    try:
        return TensorSpec.from_spec(value)
    except (TypeError, ValueError) as error:
        raise _unsupported(value) from error


# --------------------------------------------------------------------------- encoding


def _shape_to_proto(shape: Shape, proto: tensor_shape_pb2.TensorShapeProto) -> None:
    proto.SetInParent()
    if shape is None:
        proto.unknown_rank = True
        return
    for size in shape:
        proto.dim.add(size=-1 if size is None else size)


def _string_bytes(item: object) -> bytes:
    data = string_bytes(item)
    if data is None:
        raise ValueError(f"String bound elements must be str or bytes, got {item!r}")
    return data


def _array_to_tensor_proto(
    array: npt.NDArray[Any], dtype: np.dtype[Any], proto: tensor_pb2.TensorProto
) -> None:
    proto.dtype = _dtypes.dtype_to_enum(dtype)  # type: ignore[assignment]
    _shape_to_proto(array.shape, proto.tensor_shape)
    if dtype == _dtypes.STRING_DTYPE:
        proto.string_val.extend(_string_bytes(item) for item in array.ravel())
    else:
        proto.tensor_content = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<")).tobytes()


def _encode_into(value: object, proto: struct_pb2.StructuredValue) -> None:
    if value is None:
        proto.none_value.SetInParent()
    elif isinstance(value, BoundedTensorSpec):
        bounded = proto.bounded_tensor_spec_value
        bounded.SetInParent()
        if value.name:
            bounded.name = value.name
        _shape_to_proto(value.shape, bounded.shape)
        bounded.dtype = _dtypes.dtype_to_enum(value.dtype)  # type: ignore[assignment]
        _array_to_tensor_proto(value.minimum, value.dtype, bounded.minimum)
        _array_to_tensor_proto(value.maximum, value.dtype, bounded.maximum)
    elif isinstance(value, TensorSpec):
        spec = proto.tensor_spec_value
        spec.SetInParent()
        if value.name:
            spec.name = value.name
        _shape_to_proto(value.shape, spec.shape)
        spec.dtype = _dtypes.dtype_to_enum(value.dtype)  # type: ignore[assignment]
    elif _is_namedtuple(value):
        named = proto.named_tuple_value
        named.SetInParent()
        named.name = type(value).__name__
        for field in type(value)._fields:  # type: ignore[attr-defined]
            pair = named.values.add(key=field)
            _encode_into(getattr(value, field), pair.value)
    elif isinstance(value, tuple):
        proto.tuple_value.SetInParent()
        for item in value:
            _encode_into(item, proto.tuple_value.values.add())
    elif isinstance(value, list):
        proto.list_value.SetInParent()
        for item in value:
            _encode_into(item, proto.list_value.values.add())
    elif isinstance(value, Mapping):
        proto.dict_value.SetInParent()
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"Signature dict keys must be str, got {key!r}")
            _encode_into(item, proto.dict_value.fields[key])
    elif _is_spec_like(value):
        _encode_into(_as_spec(value), proto)
    else:
        raise _unsupported(value)


def encode_signature(signature: object) -> struct_pb2.StructuredValue:
    """Encodes a nest of specs as a ``StructuredValue``.

    Args:
      signature: ``None``, a spec, or a nest of dicts (``str`` keys), lists, tuples and
        namedtuples whose leaves are specs (reverb_py or ``tf.TensorSpec``-like) or
        ``None``.

    Returns:
      The proto, as TensorFlow's structure coder would write it.

    Raises:
      ValueError: ``Unsupported signature spec: <leaf>`` for a leaf that is not a spec,
        or a dict key that is not a ``str``.
    """
    proto = struct_pb2.StructuredValue()
    _encode_into(signature, proto)
    return proto


def check_sendable(proto: struct_pb2.StructuredValue) -> None:
    """Refuses a signature too deeply nested for the replies that carry it.

    A ``ServerInfo`` reply holds the signature two messages deep, and protobuf parsers
    (Python's and C++'s) stop at 100 nested messages: a deeper signature would make every
    ``server_info`` of the server fail. The check parses the signature as a reply would
    carry it, with four levels to spare (about 30 levels of dicts or 46 of lists).

    Raises:
      ValueError: the signature is nested too deeply.
    """
    reply = reverb_service_pb2.ServerInfoResponse()
    spare = reply.table_info.add().signature
    for _ in range(2):
        spare = spare.list_value.values.add()
    try:
        spare.MergeFromString(proto.SerializeToString())
        reverb_service_pb2.ServerInfoResponse.FromString(reply.SerializeToString())
    except DecodeError:
        raise ValueError(
            "The signature is nested too deeply: replies that carry it could not be "
            "parsed (protobuf stops at 100 nested messages; about 30 levels of dicts or "
            "46 of lists and tuples fit)."
        ) from None


# --------------------------------------------------------------------------- decoding


def _shape_from_proto(proto: tensor_shape_pb2.TensorShapeProto) -> Shape:
    if proto.unknown_rank:
        return None
    return tuple(None if dim.size < 0 else dim.size for dim in proto.dim)


@functools.cache
def _namedtuple_class(name: str, fields: tuple[str, ...]) -> Callable[..., tuple[Any, ...]]:
    factory: Callable[..., Callable[..., tuple[Any, ...]]] = collections.namedtuple
    return factory(name, fields)


def decode_signature(proto: struct_pb2.StructuredValue) -> Any:
    """Decodes a ``StructuredValue`` into a nest of specs.

    Args:
      proto: a signature as stored in ``TableInfo.signature``.

    Returns:
      ``None``, a spec, or a nest of dicts, lists, tuples and namedtuples of specs.

    Raises:
      ValueError: a node that is not part of a signature (plain values, ``TypeSpec``s
        other than TensorSpec / BoundedTensorSpec, ...) or an unsupported dtype;
        :class:`~reverb_py.errors.InvalidArgumentError` (a ``ValueError``) for bounds that
        do not decode.
    """
    kind = proto.WhichOneof("kind")
    if kind is None or kind == "none_value":
        return None
    if kind == "tensor_spec_value":
        spec = proto.tensor_spec_value
        return TensorSpec(
            _shape_from_proto(spec.shape), _dtypes.enum_to_dtype(spec.dtype), spec.name or None
        )
    if kind == "bounded_tensor_spec_value":
        bounded = proto.bounded_tensor_spec_value
        return BoundedTensorSpec(
            _shape_from_proto(bounded.shape),
            _dtypes.enum_to_dtype(bounded.dtype),
            decode_plain_tensor(bounded.minimum),
            decode_plain_tensor(bounded.maximum),
            bounded.name or None,
        )
    if kind == "list_value":
        return [decode_signature(item) for item in proto.list_value.values]
    if kind == "tuple_value":
        return tuple(decode_signature(item) for item in proto.tuple_value.values)
    if kind == "dict_value":
        fields = proto.dict_value.fields
        return {key: decode_signature(fields[key]) for key in sorted(fields)}
    if kind == "named_tuple_value":
        named = proto.named_tuple_value
        cls = _namedtuple_class(named.name, tuple(pair.key for pair in named.values))
        return cls(*(decode_signature(pair.value) for pair in named.values))
    raise ValueError(f"Unsupported signature value: {kind}")


# --------------------------------------------------------------------------- flattening


def _flatten_into(value: object, path: tuple[str, ...], out: list[tuple[str, TensorSpec]]) -> None:
    if value is None:
        return
    if isinstance(value, TensorSpec):
        parts = (*path, value.name) if value.name else path
        out.append(("/".join(parts), value))
    elif _is_namedtuple(value):
        for field in type(value)._fields:  # type: ignore[attr-defined]
            _flatten_into(getattr(value, field), (*path, field), out)
    elif isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            _flatten_into(item, (*path, str(index)), out)
    elif isinstance(value, Mapping):
        for key in sorted(value):
            _flatten_into(value[key], (*path, str(key)), out)
    elif _is_spec_like(value):
        _flatten_into(_as_spec(value), path, out)
    else:
        raise _unsupported(value)


def flatten_signature(signature: object) -> list[tuple[str, TensorSpec]]:
    """Flattens a signature nest into named specs, one per column.

    Order (that of ``tree.flatten``): dict keys sorted, lists and tuples by index,
    namedtuples in field order. ``None`` nodes contribute no entry (a ``None`` signature
    flattens to ``[]``).

    Name of an entry: the path components (dict key, list/tuple index, namedtuple field
    name) followed by the spec's own name when it has one, joined with ``/``. For
    example ``{'obs': [TensorSpec((), name='x'), TensorSpec(())]}`` gives ``'obs/0/x'``
    and ``'obs/1'``; a lone unnamed spec gives ``''``.

    Args:
      signature: a nest as accepted by :func:`encode_signature` (TF-like leaves are
        converted).

    Returns:
      ``(name, spec)`` pairs in flattening order.

    Raises:
      ValueError: ``Unsupported signature spec: <leaf>`` for a leaf that is not a spec.
    """
    out: list[tuple[str, TensorSpec]] = []
    _flatten_into(signature, (), out)
    return out


def decode_signature_for_caller(proto: struct_pb2.StructuredValue) -> Any:
    """The signature as the caller's world has it: ``tf.TensorSpec`` nests when
    TensorFlow is already imported, reverb_py's specs otherwise.

    NOTE(tf-specs): TensorFlow is never imported here: only a process that imported it
    (``"tensorflow" in sys.modules``) gets TensorFlow's specs, decoded by TensorFlow's
    own structure coder from the same bytes, exactly as dm-reverb decodes them. If that
    coder cannot be loaded or refuses the message, reverb_py's decoding is used.
    """
    if "tensorflow" in sys.modules:
        try:
            # By name: TensorFlow is an optional dependency, without type stubs here.
            tf_struct_pb2 = importlib.import_module("tensorflow.core.protobuf.struct_pb2")
            nested_structure_coder = importlib.import_module(
                "tensorflow.python.saved_model.nested_structure_coder"
            )
        except ImportError:
            pass
        else:
            try:
                message = tf_struct_pb2.StructuredValue.FromString(proto.SerializeToString())
                return nested_structure_coder.decode_proto(message)
            except Exception:  # noqa: BLE001 - fall back to reverb_py's decoding
                pass
    return decode_signature(proto)
