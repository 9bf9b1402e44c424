"""Client operations written once against Reverb's public API.

Every function takes the ``reverb``-like module as ``rv``: the dm-reverb worker process
calls them with ``reverb``, the test process with ``reverb_py`` (blocking client), so
both implementations run the very same scenario. Only the standard library and numpy
are imported here; arguments and results are plain values that :mod:`_wire` can carry.

Item layouts for :func:`write_trajectory` are nests (dicts/lists/tuples) whose leaves
are strings naming history slices: ``"col[-1]"`` (one step, squeezed) or ``"col[-3:]"``
/ ``"col[:]"`` (a slice, with a time axis).
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import numpy as np

try:  # In the test process this is the package ``tests.interop``.
    from . import _acme, _tables
except ImportError:  # In a dm-reverb child process the directory is on sys.path.
    import _acme  # type: ignore[no-redef]
    import _tables  # type: ignore[no-redef]

_REF = re.compile(r"^(?P<col>.+)\[(?P<start>-?\d*)(?P<colon>:)?(?P<stop>-?\d*)\]$")


def parse_ref(text: str) -> tuple[str, Any]:
    """``"obs[-3:]"`` -> ``("obs", slice(-3, None))``; ``"obs[-1]"`` -> ``("obs", -1)``."""
    match = _REF.match(text)
    if not match:
        raise ValueError(f"bad column reference {text!r}")
    col = match["col"]
    if match["colon"]:
        start = int(match["start"]) if match["start"] else None
        stop = int(match["stop"]) if match["stop"] else None
        return col, slice(start, stop)
    return col, int(match["start"])


def map_leaves(fn: Any, nest: Any) -> Any:
    if isinstance(nest, dict):
        return {k: map_leaves(fn, v) for k, v in nest.items()}
    if isinstance(nest, tuple) and hasattr(nest, "_fields"):
        return type(nest)(*[map_leaves(fn, v) for v in nest])
    if isinstance(nest, (list, tuple)):
        return type(nest)(map_leaves(fn, v) for v in nest)
    return fn(nest)


def trajectory_from_history(history: Any, layout: Any) -> Any:
    def column(text: str) -> Any:
        col, index = parse_ref(text)
        return history[col][index]

    return map_leaves(column, layout)


def _after(item: dict, num_steps: int) -> int:
    after = item.get("after_step", num_steps - 1)
    return after if after >= 0 else num_steps + after


def write_trajectory(
    rv: Any,
    address: str,
    steps: list,
    items: list,
    num_keep_alive_refs: int | None = None,
    validate_items: bool = True,
    end_episode: bool = False,
) -> dict:
    """Appends ``steps`` with a TrajectoryWriter and creates ``items``.

    Each item is ``{"table", "priority", "layout", "after_step" (default: last)}``.
    Returns ``{"episode_steps": ...}``.
    """
    client = rv.Client(address)
    keep = num_keep_alive_refs or len(steps)
    with client.trajectory_writer(keep, validate_items=validate_items) as writer:
        for index, step in enumerate(steps):
            writer.append(step)
            for item in items:
                if _after(item, len(steps)) == index:
                    writer.create_item(
                        item["table"],
                        item["priority"],
                        trajectory_from_history(writer.history, item["layout"]),
                    )
        writer.flush()
        episode_steps = writer.episode_steps
        if end_episode:
            writer.end_episode()
    return {"episode_steps": episode_steps}


def write_legacy(
    rv: Any,
    address: str,
    steps: list,
    items: list,
    max_sequence_length: int,
    chunk_length: int | None = None,
    delta_encoded: bool = False,
) -> None:
    """Appends ``steps`` with a legacy Writer; items are ``{"table", "num_timesteps",
    "priority", "after_step"}``."""
    client = rv.Client(address)
    with client.writer(
        max_sequence_length, delta_encoded=delta_encoded, chunk_length=chunk_length
    ) as writer:
        for index, step in enumerate(steps):
            writer.append(step)
            for item in items:
                if _after(item, len(steps)) == index:
                    writer.create_item(item["table"], item["num_timesteps"], item["priority"])


def insert(rv: Any, address: str, data: Any, priorities: dict) -> None:
    rv.Client(address).insert(data, priorities=priorities)


def info_to_json(info: Any) -> dict:
    return {
        "name": info.name,
        "current_size": int(info.current_size),
        "num_episodes": int(info.num_episodes),
        "num_deleted_episodes": int(info.num_deleted_episodes),
        "num_unique_samples": int(info.num_unique_samples),
        "max_size": int(info.max_size),
        "max_times_sampled": int(info.max_times_sampled),
        "sampler_options": options_to_json(info.sampler_options),
        "remover_options": options_to_json(info.remover_options),
        "rate_limiter_info": rate_limiter_to_json(info.rate_limiter_info),
        "signature": signature_to_json(info.signature),
    }


def options_to_json(options: Any) -> dict:
    kind = options.WhichOneof("distribution")
    out: dict = {"distribution": kind, "is_deterministic": bool(options.is_deterministic)}
    if kind == "prioritized":
        out["priority_exponent"] = options.prioritized.priority_exponent
    elif kind == "heap":
        out["min_heap"] = options.heap.min_heap
    elif kind is not None:
        out["flag"] = bool(getattr(options, kind))
    return out


def rate_limiter_to_json(info: Any) -> dict:
    return {
        "samples_per_insert": info.samples_per_insert,
        "min_diff": info.min_diff,
        "max_diff": info.max_diff,
        "min_size_to_sample": int(info.min_size_to_sample),
        "inserts": int(info.insert_stats.completed),
        "samples": int(info.sample_stats.completed),
    }


def signature_to_json(signature: Any) -> Any:
    return _tables.spec_nest_to_json(signature)


def server_info(rv: Any, address: str, timeout: Any = None) -> dict:
    infos = rv.Client(address).server_info(timeout)
    return {name: info_to_json(info) for name, info in infos.items()}


def sample_to_json(sample: Any) -> dict:
    info = sample.info
    return {
        "info": {
            "key": info.key,
            "probability": info.probability,
            "table_size": info.table_size,
            "priority": info.priority,
            "times_sampled": info.times_sampled,
        },
        "info_types": {field: type(getattr(info, field)).__name__ for field in info._fields},
        "data": map_leaves(np.asarray, sample.data) if sample.data is not None else None,
        # What the client really handed out (``data`` above is normalised to arrays).
        "data_types": map_leaves(_type_name, sample.data) if sample.data is not None else None,
    }


def _type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__name__}"


def sample(
    rv: Any,
    address: str,
    table: str,
    num_samples: int = 1,
    emit_timesteps: bool = False,
    unpack_as_table_signature: bool = False,
    rate_limiter_timeout_ms: int | None = None,
) -> list:
    """``Client.sample``; ``rate_limiter_timeout_ms`` is a reverb_py extension (only
    passed when given)."""
    client = rv.Client(address)
    extra = {}
    if rate_limiter_timeout_ms is not None:
        extra["rate_limiter_timeout_ms"] = rate_limiter_timeout_ms
    results = []
    for result in client.sample(
        table,
        num_samples,
        emit_timesteps=emit_timesteps,
        unpack_as_table_signature=unpack_as_table_signature,
        **extra,
    ):
        if emit_timesteps:
            results.append([sample_to_json(step) for step in result])
        else:
            results.append(sample_to_json(result))
    return results


def mutate_priorities(
    rv: Any, address: str, table: str, updates: list | None = None, deletes: list | None = None
) -> None:
    rv.Client(address).mutate_priorities(
        table, updates={int(k): float(p) for k, p in updates or []}, deletes=deletes or []
    )


def reset(rv: Any, address: str, table: str) -> None:
    rv.Client(address).reset(table)


def checkpoint(rv: Any, address: str) -> str:
    return rv.Client(address).checkpoint()


# ------------------------------------------------------------------ StructuredWriter


def structured_module(rv: Any) -> Any:
    """The ``structured_writer`` module of the ``reverb``-like module ``rv``."""
    return importlib.import_module(f"{rv.__name__}.structured_writer")


def structured_configs(rv: Any, kind: str, table: str, params: dict) -> list:
    """Acme's configs (``_acme.build_configs``) built with ``rv``'s module, serialised."""
    sw = structured_module(rv)
    return [config.SerializeToString() for config in _acme.build_configs(sw, kind, table, **params)]


def structured_parse_configs(rv: Any, configs: list) -> list:
    """Parses serialised configs with ``rv``'s ``Config`` and serialises them again."""
    sw = structured_module(rv)
    return [sw.Config.FromString(bytes(config)).SerializeToString() for config in configs]


def structured_write(rv: Any, address: str, configs: list, episodes: list) -> None:
    """Writes Acme-style episodes (``_acme.write_episode``) with a StructuredWriter of
    the serialised ``configs`` (parsed with ``rv``'s ``Config``)."""
    sw = structured_module(rv)
    parsed = [sw.Config.FromString(bytes(config)) for config in configs]
    writer = rv.Client(address).structured_writer(parsed)
    for episode, length in enumerate(episodes):
        _acme.write_episode(writer, episode, length)
    writer.flush()
    close = getattr(writer, "close", None)  # dm-reverb's writer closes when collected.
    if close is not None:
        close()


def write_strided_item(rv: Any, address: str, table: str) -> None:
    """One TrajectoryWriter item of steps 0 and 2 (``history['x'][0::2]``) of a chunk
    of three steps."""
    client = rv.Client(address)
    with client.trajectory_writer(3) as writer:
        writer.configure(("x",), num_keep_alive_refs=3, max_chunk_length=3)
        for step in range(3):
            writer.append({"x": np.int64(step)})
        writer.create_item(table, 1.0, {"x": writer.history["x"][0::2]})
        writer.flush()


def write_short_episodes(rv: Any, address: str, table: str, count: int) -> None:
    """``count`` one-item writers of one client, one after the other (as actors' short
    episodes): through a target of several servers, round robin spreads their streams."""
    client = rv.Client(address)
    for step in range(count):
        with client.trajectory_writer(1) as writer:
            writer.append({"x": np.float32(step)})
            writer.create_item(table, 1.0, {"x": writer.history["x"][-1]})
            writer.flush()


def sample_one_at_a_time(rv: Any, address: str, table: str, calls: int) -> list:
    """``calls`` samples of one client, each its own ``sample`` call (its own stream);
    their data."""
    client = rv.Client(address)
    values = []
    for _ in range(calls):
        for sample in client.sample(table, 1, emit_timesteps=False):
            values.append(
                float(
                    np.asarray(
                        sample.data["x"] if isinstance(sample.data, dict) else sample.data[0]
                    )
                )
            )
    return values
