"""Workload code shared by ``benchmarks.e2e``, ``benchmarks.checkpoint`` and
``benchmarks.compare``: the step data, the ``Meter`` and one repetition of each client
workload (TrajectoryWriter inserts, table fills, ``client.sample``, ``mutate_priorities``).

Nothing here imports a replay package: every function takes a ``client`` (a
``reverb_py.Client`` or a dm-reverb ``reverb.Client``, whose public APIs are the same) and a
``server`` object whose ``cpu_seconds()`` gives the server process' CPU time (or None). The
module only needs numpy (and ``cramjam`` for ``snappy_ratio``), so it also runs in the
dm-reverb environment (``benchmarks.compare`` runs its clients there).
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks._common import median, thread_cpu_seconds

FIELDS = ("obs", "action", "reward")
FRAME_SHAPE = (84, 84, 4)
SEQ_LEN = 10
FLUSH_EVERY = 16  # flush(block_until_num_items=16) after each measured item
FILL_FLUSH = 256  # the untimed table fills flush less often


# ---------------------------------------------------------------------------- data


def small_step() -> dict[str, Any]:
    return {
        "obs": np.arange(8, dtype=np.float32),
        "action": np.ones(2, np.float32),
        "reward": np.float32(0.5),
    }


def frame_pool(n: int, seed: int) -> list[np.ndarray]:
    """``n`` uint8[84,84,4] frames: a tiled 12x12 pattern (one of 4) with a 16x16 block of
    noise at a random place. Snappy compresses them to roughly 1/10 (see the JSON)."""
    rng = np.random.default_rng(seed)
    tiles = [rng.integers(0, 256, (12, 12, 4), dtype=np.uint8) for _ in range(4)]
    frames = []
    for i in range(n):
        frame = np.tile(tiles[i % len(tiles)], (7, 7, 1))
        y, x = (int(v) for v in rng.integers(0, 84 - 16, 2))
        frame[y : y + 16, x : x + 16] = rng.integers(0, 256, (16, 16, 4), dtype=np.uint8)
        frames.append(np.ascontiguousarray(frame))
    return frames


def frame_steps(pool: list[np.ndarray]) -> list[dict[str, Any]]:
    return [{"obs": f, "action": np.ones(2, np.float32), "reward": np.float32(0.5)} for f in pool]


def step_bytes(step: dict[str, Any]) -> int:
    return sum(np.asarray(step[k]).nbytes for k in FIELDS)


def snappy_ratio(pool: list[np.ndarray]) -> float | None:
    try:
        import cramjam
    except ImportError:
        return None
    raw = sum(f.nbytes for f in pool)
    packed = sum(len(bytes(cramjam.snappy.compress_raw(f.tobytes()))) for f in pool)
    return packed / raw


# ---------------------------------------------------------------------------- measurement


class Meter:
    """Wall time and CPU time of this process and of the server over one repetition."""

    def __init__(self, server: Any) -> None:
        self._server = server

    def __enter__(self) -> Meter:
        gc.collect()
        self._s0 = self._server.cpu_seconds()
        self._threads0 = thread_cpu_seconds()
        self._c0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.client_cpu = time.process_time() - self._c0
        s1 = self._server.cpu_seconds()
        self.server_cpu = None if s1 is None or self._s0 is None else s1 - self._s0
        threads1 = thread_cpu_seconds()
        self.client_threads_cpu = {
            _thread_label(name): cpu - self._threads0.get(name, 0.0)
            for name, cpu in threads1.items()
        }

    def rep(self, count: int, nbytes: int) -> dict[str, Any]:
        return {
            "count": count,
            "bytes": nbytes,
            "seconds": self.seconds,
            "client_cpu": self.client_cpu,
            "server_cpu": self.server_cpu,
            "client_threads_cpu": self.client_threads_cpu,
        }


def _thread_label(name: str) -> str:
    if name == "MainThread":
        return "main"
    if name == "reverb_py-client":
        return "client_loop"
    return "other"


def _summarize(runs: list[dict[str, Any]], unit: str, with_bytes: bool) -> dict[str, Any]:
    rates = [r["count"] / r["seconds"] for r in runs]
    out: dict[str, Any] = {
        "rate": median(rates),
        "unit": unit,
        "runs": rates,
        "count_per_run": [r["count"] for r in runs],
        "seconds_per_run": [r["seconds"] for r in runs],
        "client_cpu_per_wall_s": median([r["client_cpu"] / r["seconds"] for r in runs]),
    }
    srv = [r["server_cpu"] / r["seconds"] for r in runs if r["server_cpu"] is not None]
    out["server_cpu_per_wall_s"] = median(srv) if srv else None
    labels = sorted({k for r in runs for k in r.get("client_threads_cpu", {})})
    out["client_threads_cpu_per_wall_s"] = {
        k: median([r["client_threads_cpu"].get(k, 0.0) / r["seconds"] for r in runs])
        for k in labels
    }
    if with_bytes:
        mbs = [r["bytes"] / r["seconds"] / 1e6 for r in runs]
        out["mb_per_s"] = median(mbs)
        out["mb_per_s_runs"] = mbs
    return out


def _step_cycle(steps: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    while True:
        yield from steps


def writer_rep(
    client: Any,
    server: Any,
    table: str,
    steps: list[dict[str, Any]],
    duration: float,
    *,
    length: int = 1,
    flush_every: int = 1,
    block_until: int = FLUSH_EVERY,
    max_items: int | None = None,
    warmup: int = 50,
    priorities: np.ndarray | None = None,
) -> dict[str, Any]:
    """One writer repetition: a new TrajectoryWriter, ``warmup`` untimed items, then items
    until ``duration`` seconds (or ``max_items``) pass, then a final blocking ``flush()``
    (counted). One step is appended per item; the item covers the last ``length`` steps."""
    nbytes = step_bytes(steps[0])
    source = _step_cycle(steps)
    prio = None if priorities is None else itertools.cycle(priorities.tolist())
    with client.trajectory_writer(num_keep_alive_refs=max(SEQ_LEN, length)) as writer:
        # `writer.history` exists only after the first append. With length > 1, fill the
        # history first so that every item has `length` steps.
        history = None
        for _ in range(length - 1):
            writer.append(next(source))
            history = writer.history
        for _ in range(warmup):
            writer.append(next(source))
            history = writer.history
            writer.create_item(table, 1.0, {k: history[k][-length:] for k in FIELDS})
        writer.flush()
        n = 0
        with Meter(server) as meter:
            deadline = meter.t0 + duration
            while True:
                writer.append(next(source))
                if history is None:  # first step of a fill (no warm-up)
                    history = writer.history
                writer.create_item(
                    table,
                    1.0 if prio is None else next(prio),
                    {k: history[k][-length:] for k in FIELDS},
                )
                n += 1
                if n % flush_every == 0 or n == max_items:
                    writer.flush(block_until_num_items=block_until)
                    if time.perf_counter() >= deadline or (max_items and n >= max_items):
                        break
            writer.flush()
    return meter.rep(n, n * nbytes)


def fill(
    client: Any,
    server: Any,
    table: str,
    steps: list[dict[str, Any]],
    n: int,
    priorities: np.ndarray | None = None,
) -> dict[str, Any]:
    """Writes ``n`` length-1 items into ``table`` (flushing every 256), untimed workload."""
    rep = writer_rep(
        client,
        server,
        table,
        steps,
        duration=float("inf"),
        flush_every=FILL_FLUSH,
        block_until=FILL_FLUSH,
        max_items=n,
        warmup=0,
        priorities=priorities,
    )
    return {"items": rep["count"], "items_per_s": rep["count"] / rep["seconds"]}


def sample_rep(
    client: Any, server: Any, table: str, per_call: int, duration: float
) -> dict[str, Any]:
    """``client.sample(table, per_call, emit_timesteps=False)`` calls until ``duration``."""
    n = 0
    nbytes = 0
    with Meter(server) as meter:
        deadline = meter.t0 + duration
        while True:
            got = 0
            sample = None
            for sample in client.sample(table, num_samples=per_call, emit_timesteps=False):
                got += 1
            assert got == per_call and sample is not None, (got, per_call)
            n += got
            nbytes += got * sum(np.asarray(a).nbytes for a in sample.data)
            if time.perf_counter() >= deadline:
                break
    return meter.rep(n, nbytes)


def check_samples(client: Any, table: str, steps: list[dict[str, Any]], n: int = 20) -> None:
    """Untimed sanity check: ``n`` samples of ``table`` hold steps that were written, as
    length-1 columns in the flattened order of the step (sorted dict keys)."""
    written = {tuple(np.asarray(step[k]).tobytes() for k in sorted(FIELDS)) for step in steps}
    for sample in client.sample(table, num_samples=n, emit_timesteps=False):
        data = sample.data
        assert len(data) == len(FIELDS), f"{table}: {len(data)} columns"
        assert all(np.asarray(col).shape[0] == 1 for col in data), [c.shape for c in data]
        got = tuple(np.asarray(col)[0].tobytes() for col in data)
        assert got in written, f"{table}: sampled data differs from every written step"


def collect_keys(client: Any, table: str, n_distinct: int, max_samples: int) -> list[int]:
    """Distinct existing keys of ``table``, found by sampling it (untimed)."""
    keys: dict[int, None] = {}
    drawn = 0
    while len(keys) < n_distinct and drawn < max_samples:
        for sample in client.sample(table, num_samples=10_000, emit_timesteps=False):
            keys[int(sample.info.key)] = None
        drawn += 10_000
    return list(keys)


def mutate_rep(
    client: Any,
    server: Any,
    table: str,
    updates: list[dict[int, float]],
    duration: float,
) -> dict[str, Any]:
    """``client.mutate_priorities(table, updates=u)`` over the prebuilt ``updates`` (cycled)
    until ``duration`` seconds pass."""
    n = 0
    i = 0
    with Meter(server) as meter:
        deadline = meter.t0 + duration
        while True:
            upd = updates[i]
            client.mutate_priorities(table, updates=upd)
            n += len(upd)
            i = (i + 1) % len(updates)
            if time.perf_counter() >= deadline:
                break
    return meter.rep(n, 0)


def mutate_latency_rep(
    client: Any,
    server: Any,
    table: str,
    updates: list[dict[int, float]],
    duration: float,
) -> dict[str, Any]:
    """As :func:`mutate_rep`, timing every call on its own: the round trip of one
    ``mutate_priorities`` call, in ms (median, 10th and 90th percentile)."""
    latencies = []
    i = 0
    clock = time.perf_counter
    with Meter(server) as meter:
        deadline = meter.t0 + duration
        while True:
            upd = updates[i]
            t0 = clock()
            client.mutate_priorities(table, updates=upd)
            t1 = clock()
            latencies.append((t1 - t0) * 1e3)
            i = (i + 1) % len(updates)
            if t1 >= deadline:
                break
    rep = meter.rep(len(latencies), 0)
    ordered = sorted(latencies)
    rep["latency_ms"] = median(ordered)
    rep["latency_ms_p10"] = ordered[len(ordered) // 10]
    rep["latency_ms_p90"] = ordered[(len(ordered) * 9) // 10]
    return rep


def _write_item(writer: Any, table: str, step: dict[str, Any]) -> None:
    """One actor step: ``append`` and a length-1 ``create_item`` of it."""
    writer.append(step)
    history = writer.history
    writer.create_item(table, 1.0, {k: history[k][-1:] for k in FIELDS})


def writer_loop(
    writer: Any,
    table: str,
    step: dict[str, Any],
    progress: list[tuple[float, int]],
    should_stop: Callable[[], bool],
    t_end: float,
    block_until: int = FLUSH_EVERY,
) -> None:
    """An actor's writer: per step ``append``, a length-1 ``create_item`` and
    ``flush(block_until_num_items=block_until)``; ``(time.monotonic(), items)`` in
    ``progress`` after every flush, until ``t_end`` or ``should_stop()``."""
    progress.append((time.monotonic(), 0))
    n = 0
    while not should_stop():
        _write_item(writer, table, step)
        n += 1
        writer.flush(block_until_num_items=block_until)
        now = time.monotonic()
        progress.append((now, n))
        if now >= t_end:
            break


async def async_writer_loop(
    writer: Any,
    table: str,
    step: dict[str, Any],
    progress: list[tuple[float, int]],
    t_end: float,
    block_until: int = FLUSH_EVERY,
) -> None:
    """:func:`writer_loop` for an asyncio writer (``await writer.flush(...)``)."""
    progress.append((time.monotonic(), 0))
    n = 0
    while True:
        _write_item(writer, table, step)
        n += 1
        await writer.flush(block_until_num_items=block_until)
        now = time.monotonic()
        progress.append((now, n))
        if now >= t_end:
            break


def _repeat(fn: Callable[[], dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    return [fn() for _ in range(repeats)]
