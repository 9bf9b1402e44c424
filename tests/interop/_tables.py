"""Table descriptions in JSON, built into tables by either implementation.

Imported by the test process (with ``reverb_py``) and by the dm-reverb child processes
(with ``reverb``); it uses only the standard library and numpy. Both packages have the
same ``Table`` / ``selectors`` / ``rate_limiters`` API, so one builder serves both; only
the TensorSpec class differs (``tf.TensorSpec`` vs ``reverb_py.TensorSpec``), and is
passed in as ``make_spec``.

A table description::

    {"name": "t", "sampler": ["prioritized", 0.8], "remover": ["fifo"],
     "max_size": 100, "max_times_sampled": 0, "rate_limiter": ["min_size", 1],
     "signature": <spec nest or null>}
    {"name": "q", "queue": 2}            # Table.queue(name, 2)
    {"name": "s", "stack": 2}            # Table.stack(name, 2)

Selectors: ``["uniform"]``, ``["prioritized", e]``, ``["fifo"]``, ``["lifo"]``,
``["min_heap"]``, ``["max_heap"]``. Rate limiters: ``["min_size", n]``,
``["ratio", spi, min_size, error_buffer]``, ``["generic", spi, min_size, min_diff,
max_diff]``, ``["queue", n]``, ``["stack", n]``.

A spec nest: ``{"spec": [shape, dtype, name]}``, ``{"bounded": [shape, dtype, name,
minimum, maximum]}``, ``{"dict": {k: nest}}``, ``{"tuple": [...]}``, ``{"list": [...]}``,
``{"namedtuple": [type_name, [fields], [nests]]}``. ``shape`` is a list with ``null``
for unknown dims (or ``null`` for unknown rank); ``dtype`` a numpy name or ``"string"``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["build_tables", "build_signature", "spec_nest_to_json", "dtype_name"]

_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], type] = {}


def _namedtuple(name: str, fields: list[str]) -> type:
    key = (name, tuple(fields))
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def _selector(rv: Any, desc: list) -> Any:
    kind, *args = desc
    return {
        "uniform": lambda: rv.selectors.Uniform(),
        "prioritized": lambda: rv.selectors.Prioritized(*args),
        "fifo": lambda: rv.selectors.Fifo(),
        "lifo": lambda: rv.selectors.Lifo(),
        "min_heap": lambda: rv.selectors.MinHeap(),
        "max_heap": lambda: rv.selectors.MaxHeap(),
    }[kind]()


def _rate_limiter(rv: Any, desc: list) -> Any:
    kind, *args = desc
    limiters = rv.rate_limiters
    if kind == "min_size":
        return limiters.MinSize(*args)
    if kind == "ratio":
        spi, min_size, error_buffer = args
        if isinstance(error_buffer, list):
            error_buffer = tuple(error_buffer)
        return limiters.SampleToInsertRatio(spi, min_size, error_buffer)
    if kind == "generic":
        return limiters.RateLimiter(*args)
    if kind == "queue":
        return limiters.Queue(*args)
    if kind == "stack":
        return limiters.Stack(*args)
    raise ValueError(f"unknown rate limiter {desc!r}")


def build_signature(nest: Any, make_spec: Callable[..., Any]) -> Any:
    """Builds a spec nest; ``make_spec(kind, shape, dtype, name, minimum, maximum)``."""
    if nest is None:
        return None
    ((kind, value),) = nest.items()
    if kind == "spec":
        shape, dtype, name = value
        return make_spec("spec", shape, dtype, name, None, None)
    if kind == "bounded":
        shape, dtype, name, minimum, maximum = value
        return make_spec("bounded", shape, dtype, name, minimum, maximum)
    if kind == "dict":
        return {k: build_signature(v, make_spec) for k, v in value.items()}
    if kind == "tuple":
        return tuple(build_signature(v, make_spec) for v in value)
    if kind == "list":
        return [build_signature(v, make_spec) for v in value]
    if kind == "namedtuple":
        type_name, fields, values = value
        cls = _namedtuple(type_name, fields)
        return cls(*[build_signature(v, make_spec) for v in values])
    raise ValueError(f"unknown spec nest {nest!r}")


def build_tables(descs: list[dict], rv: Any, make_spec: Callable[..., Any]) -> list[Any]:
    """The tables of ``descs``, built with the ``reverb``-like module ``rv``."""
    tables = []
    for desc in descs:
        signature = build_signature(desc.get("signature"), make_spec)
        if "queue" in desc:
            tables.append(rv.Table.queue(desc["name"], desc["queue"], signature=signature))
            continue
        if "stack" in desc:
            tables.append(rv.Table.stack(desc["name"], desc["stack"], signature=signature))
            continue
        tables.append(
            rv.Table(
                name=desc["name"],
                sampler=_selector(rv, desc["sampler"]),
                remover=_selector(rv, desc["remover"]),
                max_size=desc["max_size"],
                rate_limiter=_rate_limiter(rv, desc["rate_limiter"]),
                max_times_sampled=desc.get("max_times_sampled", 0),
                signature=signature,
            )
        )
    return tables


def dtype_name(dtype: Any) -> str:
    """``tf.DType`` or numpy dtype -> numpy-style name; strings are ``"string"``."""
    name = getattr(dtype, "name", None) or str(dtype)
    if name in ("object", "string") or name.startswith(("bytes", "str")):
        return "string"
    return name


def _shape(shape: Any) -> Any:
    if shape is None:
        return None
    if hasattr(shape, "as_list"):
        if getattr(shape, "rank", 0) is None:
            return None
        return list(shape.as_list())
    return [None if d is None else int(d) for d in shape]


def spec_nest_to_json(nest: Any) -> Any:
    """A decoded signature (TF or reverb_py specs) in the description format.

    Each spec also records its class as ``"type"``: ``"<top package>.<class name>"``.
    """
    if nest is None:
        return None
    if isinstance(nest, dict):
        return {"dict": {k: spec_nest_to_json(v) for k, v in nest.items()}}
    if isinstance(nest, tuple) and hasattr(nest, "_fields"):
        return {
            "namedtuple": [
                type(nest).__name__,
                list(nest._fields),
                [spec_nest_to_json(v) for v in nest],
            ]
        }
    if isinstance(nest, tuple):
        return {"tuple": [spec_nest_to_json(v) for v in nest]}
    if isinstance(nest, list):
        return {"list": [spec_nest_to_json(v) for v in nest]}
    cls = type(nest)
    kind = f"{cls.__module__.split('.')[0]}.{cls.__name__}"
    shape, dtype, name = _shape(nest.shape), dtype_name(nest.dtype), nest.name
    if hasattr(nest, "minimum"):
        minimum = np.asarray(nest.minimum).tolist()
        maximum = np.asarray(nest.maximum).tolist()
        return {"bounded": [shape, dtype, name, minimum, maximum], "type": kind}
    return {"spec": [shape, dtype, name], "type": kind}


def strip_types(nest: Any) -> Any:
    """``spec_nest_to_json`` output without the ``"type"`` entries."""
    if isinstance(nest, dict):
        return {k: strip_types(v) for k, v in nest.items() if k != "type"}
    if isinstance(nest, list):
        return [strip_types(v) for v in nest]
    return nest


def spec_types(nest: Any) -> set:
    """Every ``"type"`` recorded in a ``spec_nest_to_json`` output."""
    found: set = set()
    if isinstance(nest, dict):
        if "type" in nest:
            found.add(nest["type"])
        for k, v in nest.items():
            if k != "type":
                found |= spec_types(v)
    elif isinstance(nest, list):
        for v in nest:
            found |= spec_types(v)
    return found
