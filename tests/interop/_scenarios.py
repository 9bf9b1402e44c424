"""Tables, data and expected values shared by the interop tests (test process only)."""

from __future__ import annotations

import collections
import math
from typing import Any

import numpy as np

# ------------------------------------------------------------------ tables

MIN_SIZE_1 = ["min_size", 1]

#: The per-trajectory signature of the ``sig`` table: every nest kind, a bounded spec,
#: strings, unknown and known dims, and names.
SIGNATURE = {
    "dict": {
        "obs": {"spec": [[None, 3], "float32", "obs"]},
        "act": {"spec": [[None], "int64", "act"]},
        "pair": {
            "tuple": [
                {"spec": [[None], "bool", "flag"]},
                {"bounded": [[3, 2], "int32", "level", 0, 10]},
            ]
        },
        "text": {"list": [{"spec": [[None], "string", "text"]}]},
        "step": {
            "namedtuple": [
                "Step",
                ["reward", "discount"],
                [
                    {"spec": [[None], "float64", "reward"]},
                    {"spec": [[None], "float32", "discount"]},
                ],
            ]
        },
        "last_obs": {"spec": [[3], "float32", "last_obs"]},
    }
}

#: A per-timestep signature (for ``TimestepDataset`` and the legacy writer).
STEP_SIGNATURE = {
    "dict": {
        "obs": {"spec": [[3], "float32", "obs"]},
        "act": {"spec": [[], "int64", "act"]},
        "text": {"spec": [[], "string", "text"]},
    }
}

SHARED_TABLES: list[dict] = [
    {
        "name": "uniform",
        "sampler": ["uniform"],
        "remover": ["fifo"],
        "max_size": 1000,
        "rate_limiter": MIN_SIZE_1,
    },
    {
        "name": "prio",
        "sampler": ["prioritized", 0.8],
        "remover": ["fifo"],
        "max_size": 1000,
        "rate_limiter": MIN_SIZE_1,
    },
    {
        "name": "fifo",
        "sampler": ["fifo"],
        "remover": ["fifo"],
        "max_size": 1000,
        "rate_limiter": MIN_SIZE_1,
    },
    {
        "name": "fifo3",
        "sampler": ["fifo"],
        "remover": ["fifo"],
        "max_size": 1000,
        "max_times_sampled": 3,
        "rate_limiter": MIN_SIZE_1,
    },
    {
        "name": "heap",
        "sampler": ["max_heap"],
        "remover": ["min_heap"],
        "max_size": 3,
        "rate_limiter": MIN_SIZE_1,
    },
    {
        "name": "lifo",
        "sampler": ["lifo"],
        "remover": ["lifo"],
        "max_size": 10,
        "max_times_sampled": 1,
        "rate_limiter": ["generic", 1.5, 2, -10.0, 12.5],
    },
    {
        "name": "ratio",
        "sampler": ["fifo"],
        "remover": ["fifo"],
        "max_size": 100,
        "rate_limiter": ["ratio", 2.0, 2, 10.0],
    },
    {"name": "queue", "queue": 2},
    {"name": "stack", "stack": 3},
    {
        "name": "sig",
        "sampler": ["uniform"],
        "remover": ["fifo"],
        "max_size": 1000,
        "rate_limiter": MIN_SIZE_1,
        "signature": SIGNATURE,
    },
    {
        "name": "steps_sig",
        "sampler": ["uniform"],
        "remover": ["fifo"],
        "max_size": 1000,
        "rate_limiter": MIN_SIZE_1,
        "signature": STEP_SIGNATURE,
    },
]

TABLE_NAMES = [table["name"] for table in SHARED_TABLES]


def rp_make_spec(kind: str, shape: Any, dtype: str, name: str, minimum: Any, maximum: Any) -> Any:
    import reverb_py

    np_dtype = np.dtype(object) if dtype == "string" else np.dtype(dtype)
    if kind == "bounded":
        return reverb_py.BoundedTensorSpec(shape, np_dtype, minimum, maximum, name)
    return reverb_py.TensorSpec(shape, np_dtype, name)


def build_rp_tables(descs: list[dict]) -> list[Any]:
    import reverb_py

    from . import _tables

    return _tables.build_tables(descs, reverb_py, rp_make_spec)


# ------------------------------------------------------------------ data

NUMERIC_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
ALL_DTYPES = [*NUMERIC_DTYPES, "string"]

_FLOAT_BITS = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}
_NAN_PAYLOAD = {
    "float16": 0x7E01,
    "float32": 0x7FC00123,
    "float64": 0x7FF8000000000123,
}


def _strings(values: list[bytes]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _numeric_step(dtype: str, step: int, rng: np.random.Generator) -> np.ndarray:
    """Two values per step; edge values on the early steps."""
    np_dtype = np.dtype(dtype)
    if dtype == "bool":
        return np.array([step % 2 == 0, step % 3 == 0], dtype=bool)
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)
        edges = [info.min, info.max, 0, 1 if np_dtype.kind == "u" else -1]
        first = edges[step % len(edges)]
        second = rng.integers(info.min, info.max, dtype=np_dtype, endpoint=True)
        return np.array([first, second], dtype=np_dtype)
    if np_dtype.kind == "f":
        bits = _FLOAT_BITS[dtype]
        payload_nan = np.array([_NAN_PAYLOAD[dtype]], dtype=bits).view(np_dtype)[0]
        finfo = np.finfo(np_dtype)
        edges = [
            payload_nan,
            np_dtype.type(-0.0),
            np_dtype.type(np.inf),
            finfo.smallest_subnormal,
            np_dtype.type(-np.inf),
            finfo.max,
        ]
        first = edges[step % len(edges)]
        second = np_dtype.type(rng.standard_normal())
        return np.array([first, second], dtype=np_dtype)
    if np_dtype.kind == "c":
        part = "float32" if dtype == "complex64" else "float64"
        real = _numeric_step(part, step, rng)
        imag = _numeric_step(part, step + 1, rng)
        out = np.empty(2, dtype=np_dtype)
        out.real, out.imag = real, imag
        return out
    raise ValueError(dtype)


def all_dtype_steps(num_steps: int = 4, seed: int = 7) -> list[dict[str, Any]]:
    """Steps with one ``(2,)`` column per dtype plus 0-d columns and a 2-D column."""
    rng = np.random.default_rng(seed)
    steps = []
    for step in range(num_steps):
        values: dict[str, Any] = {
            dtype: _numeric_step(dtype, step, rng) for dtype in NUMERIC_DTYPES
        }
        values["string"] = _strings(
            [b"" if step == 0 else b"step%d" % step, bytes(range(256)) * (step + 1)]
        )
        values["scalar_f64"] = np.array(step + 0.25, dtype=np.float64)
        values["scalar_u64"] = np.array(2**64 - 1 - step, dtype=np.uint64)
        values["scalar_string"] = scalar_bytes(f"ü-{step}".encode())
        values["matrix_i16"] = rng.integers(-300, 300, size=(3, 2), dtype=np.int16)
        steps.append(values)
    return steps


def scalar_bytes(value: bytes) -> np.ndarray:
    array = np.empty((), dtype=object)
    array[()] = value
    return array


def all_dtype_layout(length: int = 3) -> dict[str, str]:
    """An item over every column: a sequence of ``length`` steps and a squeezed last step."""
    layout: dict[str, str] = {}
    for column in [*ALL_DTYPES, "scalar_f64", "scalar_u64", "scalar_string", "matrix_i16"]:
        layout[f"seq_{column}"] = f"{column}[-{length}:]"
        layout[f"last_{column}"] = f"{column}[-1]"
    return layout


def sequence_layout(columns: list[str], length: int) -> dict[str, str]:
    return {column: f"{column}[-{length}:]" for column in columns}


# ------------------------------------------------------------------ nests


def flatten(nest: Any) -> list[Any]:
    """``tree.flatten`` order: dict keys sorted, sequences in order."""
    if isinstance(nest, dict):
        return [leaf for key in sorted(nest) for leaf in flatten(nest[key])]
    if isinstance(nest, (list, tuple)):
        return [leaf for value in nest for leaf in flatten(value)]
    return [nest]


def flat_paths(nest: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(nest, dict):
        return [path for key in sorted(nest) for path in flat_paths(nest[key], (*prefix, key))]
    if isinstance(nest, tuple) and hasattr(nest, "_fields"):
        return [
            path
            for field, value in zip(nest._fields, nest)
            for path in flat_paths(value, (*prefix, field))
        ]
    if isinstance(nest, (list, tuple)):
        return [path for i, value in enumerate(nest) for path in flat_paths(value, (*prefix, i))]
    return [prefix]


def expected_column(steps: list[dict], ref: str) -> np.ndarray:
    """What an item column referencing ``ref`` (``"col[-3:]"``, ``"col[-1]"``) holds."""
    from ._ops import parse_ref

    column, index = parse_ref(ref)
    values = [step[column] for step in steps]
    if isinstance(index, slice):
        return np.stack([np.asarray(v) for v in values[index]])
    return np.asarray(values[index])


def expected_trajectory(steps: list[dict], layout: Any) -> Any:
    from ._ops import map_leaves

    return map_leaves(lambda ref: expected_column(steps, ref), layout)


Step = collections.namedtuple("Step", ["reward", "discount"])


def sig_steps(num_steps: int = 4, offset: int = 0) -> list[dict[str, Any]]:
    """Steps matching :data:`SIGNATURE` (``offset`` makes the values of one writer
    distinguishable from another's)."""
    steps = []
    for i in range(num_steps):
        t = i + offset
        steps.append(
            {
                "obs": np.array([t, t + 0.5, -t], dtype=np.float32),
                "act": np.int64(10 * t + 1),
                "flag": np.bool_(t % 2 == 0),
                "level": np.array([t % 11, (t + 5) % 11], dtype=np.int32),
                "text": scalar_bytes(b"t%d" % t),
                "reward": np.float64(t / 3),
                "discount": np.float32(0.99**t),
            }
        )
    return steps


SIG_LAYOUT = {
    "obs": "obs[-3:]",
    "act": "act[-3:]",
    "pair": ("flag[-3:]", "level[-3:]"),
    "text": ["text[-3:]"],
    "step": Step("reward[-3:]", "discount[-3:]"),
    "last_obs": "obs[-1]",
}


def step_sig_steps(num_steps: int = 3, offset: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "obs": np.array([t, -t, t * 2], dtype=np.float32),
            "act": np.int64(t),
            "text": scalar_bytes(b"s%d" % t),
        }
        for t in range(offset, offset + num_steps)
    ]


# ------------------------------------------------------------------ comparisons


def describe(value: Any) -> str:
    array = np.asarray(value)
    if array.dtype == object:
        return f"object{array.shape} {array.tolist()!r}"
    return f"{array.dtype}{array.shape} bytes={array.tobytes().hex()[:96]} {array!r}"


def bit_exact_problem(got: Any, expected: Any) -> str | None:
    """None when ``got`` equals ``expected`` bit for bit (dtype, shape, bytes)."""
    got_array, expected_array = np.asarray(got), np.asarray(expected)
    if expected_array.dtype == object:
        if got_array.dtype != object:
            return f"dtype {got_array.dtype}, expected object (bytes strings)"
        if got_array.shape != expected_array.shape:
            return f"shape {got_array.shape}, expected {expected_array.shape}"
        for g, e in zip(got_array.reshape(-1).tolist(), expected_array.reshape(-1).tolist()):
            if type(g) is not bytes or g != e:
                return f"element {g!r} ({type(g).__name__}), expected {e!r}"
        return None
    if got_array.dtype != expected_array.dtype:
        return f"dtype {got_array.dtype}, expected {expected_array.dtype}"
    if got_array.shape != expected_array.shape:
        return f"shape {got_array.shape}, expected {expected_array.shape}"
    if got_array.tobytes() != expected_array.tobytes():
        return f"bytes differ: got {describe(got_array)}, expected {describe(expected_array)}"
    return None


def assert_flat_equal(where: str, got: list, expected: list, paths: list | None = None) -> None:
    """Compares two flat lists of arrays bit for bit, naming every bad column."""
    assert len(got) == len(expected), f"{where}: {len(got)} columns, expected {len(expected)}"
    problems = []
    for index, (g, e) in enumerate(zip(got, expected)):
        problem = bit_exact_problem(g, e)
        if problem:
            name = paths[index] if paths else index
            problems.append(f"  column {name}: {problem}")
    assert not problems, f"{where}: data differs:\n" + "\n".join(problems)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
