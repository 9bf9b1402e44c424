"""Values across the process boundary: JSON for structure, ``.npz`` for numeric arrays.

This module is imported by the test process (reverb_py's venv, numpy 2) *and* by the
dm-reverb child processes (dm-reverb's venv, numpy 1.26); it uses only the standard
library and numpy, and never pickles (numpy object pickles differ between 1.x and 2.x).

Encoding of a value:

* ``dict`` (str keys) -> ``{"__dict__": [[key, value], ...]}`` (order kept)
* ``list`` -> JSON list; ``tuple`` -> ``{"__tuple__": [...]}``
* namedtuple -> ``{"__namedtuple__": name, "fields": [...], "values": [...]}``
* numeric ``np.ndarray`` / numpy scalar -> ``{"__nd__": "<npz entry>", "scalar": bool}``;
  the array travels bit-exact in the ``.npz`` file
* object / bytes / str arrays -> ``{"__strings__": [["b", base64] | ["s", text], ...],
  "shape": [...], "dtype": "object" | "S" | "U", "scalar": bool}``
* ``bytes`` -> ``{"__bytes__": base64}``
* ``float`` NaN/inf -> ``{"__float__": repr}``; ints, strs, bools, None as JSON.
"""

from __future__ import annotations

import base64
import collections
import json
import math
import os
from typing import Any

import numpy as np

__all__ = ["encode", "decode", "dumps", "loads", "save", "load"]


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def _encode_strings(array: np.ndarray, scalar: bool) -> dict:
    elements = []
    for element in array.reshape(-1).tolist():
        if isinstance(element, bytes):
            elements.append(["b", base64.b64encode(element).decode("ascii")])
        elif isinstance(element, str):
            elements.append(["s", element])
        else:
            raise TypeError(f"cannot encode string-array element {element!r}")
    return {
        "__strings__": elements,
        "shape": list(array.shape),
        "dtype": array.dtype.kind if array.dtype.kind in "SU" else "object",
        "scalar": scalar,
    }


def encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Encodes ``value`` as JSON-able data; numeric arrays are added to ``arrays``."""
    if isinstance(value, (np.ndarray, np.generic)):
        scalar = isinstance(value, np.generic)
        array = np.asarray(value)
        if array.dtype.kind in "OSU":
            return _encode_strings(array, scalar)
        name = f"a{len(arrays)}"
        arrays[name] = array
        return {"__nd__": name, "scalar": scalar}
    if _is_namedtuple(value):
        return {
            "__namedtuple__": type(value).__name__,
            "fields": list(value._fields),
            "values": [encode(v, arrays) for v in value],
        }
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, arrays) for v in value]}
    if isinstance(value, list):
        return [encode(v, arrays) for v in value]
    if isinstance(value, dict):
        return {"__dict__": [[str(k), encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot encode {type(value).__name__}: {value!r}")


_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], type] = {}


def _namedtuple(name: str, fields: list[str]) -> type:
    key = (name, tuple(fields))
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def _decode_strings(obj: dict) -> Any:
    elements = [
        base64.b64decode(data) if kind == "b" else data for kind, data in obj["__strings__"]
    ]
    shape = tuple(obj["shape"])
    if obj["dtype"] == "object":
        array = np.empty(len(elements), dtype=object)
        array[:] = elements
        array = array.reshape(shape)
    else:
        array = np.array(elements).reshape(shape)
    return array[()] if obj["scalar"] else array


def decode(obj: Any, arrays: Any) -> Any:
    """Inverse of :func:`encode`; ``arrays`` maps npz entry names to arrays."""
    if isinstance(obj, list):
        return [decode(v, arrays) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__nd__" in obj:
        array = np.asarray(arrays[obj["__nd__"]])
        return array[()] if obj["scalar"] else array
    if "__strings__" in obj:
        return _decode_strings(obj)
    if "__namedtuple__" in obj:
        cls = _namedtuple(obj["__namedtuple__"], obj["fields"])
        return cls(*[decode(v, arrays) for v in obj["values"]])
    if "__tuple__" in obj:
        return tuple(decode(v, arrays) for v in obj["__tuple__"])
    if "__dict__" in obj:
        return {k: decode(v, arrays) for k, v in obj["__dict__"]}
    if "__bytes__" in obj:
        return base64.b64decode(obj["__bytes__"])
    if "__float__" in obj:
        return float(obj["__float__"])
    raise ValueError(f"unknown encoded object {obj!r}")


def dumps(value: Any, npz_path: str) -> str:
    """Encodes ``value`` to a JSON string; arrays go to ``npz_path`` (if there are any).

    The JSON carries ``{"value": ..., "npz": path or null}``.
    """
    arrays: dict[str, np.ndarray] = {}
    encoded = encode(value, arrays)
    path = None
    if arrays:
        save(npz_path, arrays)
        path = npz_path
    return json.dumps({"value": encoded, "npz": path})


def loads(text: str) -> Any:
    """Inverse of :func:`dumps` (reads and deletes the npz file)."""
    message = json.loads(text)
    return from_message(message)


def from_message(message: dict) -> Any:
    """Decodes ``{"value": ..., "npz": ...}`` (reads and deletes the npz file)."""
    arrays: dict[str, np.ndarray] = {}
    if message.get("npz"):
        arrays = load(message["npz"])
        os.unlink(message["npz"])
    return decode(message["value"], arrays)


def to_message(value: Any, npz_path: str) -> dict:
    """Like :func:`dumps` but returns the dict."""
    return json.loads(dumps(value, npz_path))


def save(path: str, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as file:
        np.savez(file, **arrays)


def load(path: str) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}
