"""reverb_py vs dm-reverb 0.14: the same workloads through each system's public API.

Run from the project root (in the reverb_py environment)::

    python -m benchmarks.compare [--quick] [--out benchmarks/results/compare.json]

dm-reverb (with TensorFlow 2.15) lives in its own environment, never in this process: the
interpreter is taken from ``REVERB_PY_DM_REVERB_PYTHON`` (default ``.venv-reverb/bin/python``,
made by ``make interop``). This process only orchestrates: every server and every client
is a worker subprocess (``python -m benchmarks.compare --worker server|client ...``) of the
system's own interpreter, which does ``import reverb_py as reverb`` or ``import reverb`` and
then runs the same code (``benchmarks._workloads``) against the same API. Workers talk to
this process over a socket pair (pickled builtins only); clients talk to servers over
loopback gRPC. Workers' output goes to log files (``--keep-logs`` keeps them); dm-reverb
workers run with ``TF_CPP_MIN_LOG_LEVEL=3``, ``CUDA_VISIBLE_DEVICES=""``.

Per system: a *main* server (tables below), a client worker for the single-client
workloads, two checkpointing servers (one table each), an actor server, 4 actor workers
and a learner worker. All are started at the beginning; the tables are filled (untimed)
one system after the other; then every measured workload runs its repetitions
ALTERNATING the two systems (rep 1: reverb_py then dm-reverb, rep 2: dm-reverb then
reverb_py, ...), so slow drifts of the shared machine hit both. Medians of the
repetitions (5 by default, ``--repeats``; 3 with ``--quick``).

Workloads (small step = obs float32[8], action float32[2], reward float32[], 44 bytes;
frame step = obs uint8[84,84,4] (compressible, as ``benchmarks.e2e``) + action + reward):

1. ``insert_small``   TrajectoryWriter, one length-1 item per step,
                      ``flush(block_until_num_items=16)`` after each item (items/s);
2. ``insert_frames``  the same with frame steps;
3. ``insert_seq``     length-10 overlapping items, one new small step per item;
4. ``sample_*``       ``client.sample(table, N, emit_timesteps=False)`` calls on a
                      100k-item small table and a 100k-item frame table, each Uniform and
                      Prioritized(0.8) (samples/s);
5. ``mutate``         ``client.mutate_priorities`` of 1,000 existing keys per call (keys/s);
6. ``actors_{1,2,4}`` 1, 2 or 4 actor processes (small steps, as workload 1) and one
                      learner process calling ``client.sample(table, 256)`` back to back,
                      on a table with ``SampleToInsertRatio``; items/s inserted (all
                      actors) and samples/s, counted in a common window after a warm-up;
7. ``checkpoint_*``   ``client.checkpoint()`` time (100k small items; 10k frame items), and
                      restart: a new server process with a ``DefaultCheckpointer`` on the
                      same directory, from process start until ``server_info`` reports the
                      full table;
8. ``memory_*``       server ``VmRSS`` growth per item while filling a one-table server
                      with 100k small items / 10k frame items.

Ratio convention: every ratio is "how many times better reverb_py is", > 1 = reverb_py
better: rates reverb_py / dm-reverb; times and bytes per item dm-reverb / reverb_py.

``--quick`` (3,000 / 300-item tables, short repetitions, 3 instead of 5 repetitions)
writes ``results/compare_quick.json``. ``--writers-flush N`` gives the many-writers
workloads ``flush(block_until_num_items=N)`` instead of 16 (their labels say which).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import numpy as np  # noqa: E402

from benchmarks import _workloads as wl  # noqa: E402
from benchmarks._common import (  # noqa: E402
    RESULTS_DIR,
    dist_versions,
    fmt_rate,
    machine_info,
    median,
    proc_cpu_seconds,
    proc_status_kib,
    write_json,
)

PROJECT_ROOT = pathlib.Path(__file__).resolve().parent.parent
SYSTEMS = ("reverb_py", "dm_reverb")
SYSTEM_LABELS = {"reverb_py": "reverb_py", "dm_reverb": "dm-reverb 0.14"}
DM_PYTHON_ENV = "REVERB_PY_DM_REVERB_PYTHON"
DM_PYTHON_DEFAULT = ".venv-reverb/bin/python"
SEED = 4242
MUTATE_KEYS_PER_CALL = 1000
MUTATE_LATENCY_KEYS = 256  # a learner's batch
LEARNER_BATCH = 256

# name -> (label, group, unit, better, target: minimum ratio (reverb_py better by that much))
WORKLOADS: dict[str, tuple[str, str, str, str, float | None]] = {
    "insert_small": (
        "TrajectoryWriter, small steps, length-1 items",
        "insert",
        "items/s",
        "higher",
        1.3,
    ),
    "insert_frames": (
        "TrajectoryWriter, uint8[84,84,4] frames, length-1 items",
        "insert",
        "items/s",
        "higher",
        1.3,
    ),
    "insert_seq": (
        "TrajectoryWriter, length-10 overlapping items (1 new small step/item)",
        "insert",
        "items/s",
        "higher",
        1.3,
    ),
    "insert_small_flush5": (
        "TrajectoryWriter, small steps, length-1 items, flush(5)",
        "insert",
        "items/s",
        "higher",
        1.0,
    ),
    "insert_frames_flush5": (
        "TrajectoryWriter, uint8[84,84,4] frames, length-1 items, flush(5)",
        "insert",
        "items/s",
        "higher",
        1.0,
    ),
    "insert_seq_flush5": (
        "TrajectoryWriter, length-10 overlapping items, flush(5)",
        "insert",
        "items/s",
        "higher",
        1.0,
    ),
    "server_cpu_insert_small": (
        "server CPU per 10,000 small items inserted (one writer, flush(16))",
        "server_cpu",
        "CPU s/10k",
        "lower",
        None,
    ),
    "sample_small_uniform": (
        "client.sample, {small} small items, Uniform",
        "sample",
        "samples/s",
        "higher",
        3.0,
    ),
    "sample_small_prioritized": (
        "client.sample, {small} small items, Prioritized(0.8)",
        "sample",
        "samples/s",
        "higher",
        3.0,
    ),
    "sample_frames_uniform": (
        "client.sample, {sample_frames} frame items, Uniform",
        "sample",
        "samples/s",
        "higher",
        2.0,
    ),
    "sample_frames_prioritized": (
        "client.sample, {sample_frames} frame items, Prioritized(0.8)",
        "sample",
        "samples/s",
        "higher",
        2.0,
    ),
    "mutate": ("mutate_priorities, 1,000 keys per call", "mutate", "keys/s", "higher", 1.0),
    "mutate_256_latency": (
        "mutate_priorities, 256 keys per call: round trip (median)",
        "mutate",
        "ms",
        "lower",
        1.0,
    ),
    "actors_1": (
        "1 actor + learner (batches of 256), items inserted",
        "actors",
        "items/s",
        "higher",
        2.0,
    ),
    "actors_2": (
        "2 actors + learner (batches of 256), items inserted",
        "actors",
        "items/s",
        "higher",
        2.0,
    ),
    "actors_4": (
        "4 actors + learner (batches of 256), items inserted",
        "actors",
        "items/s",
        "higher",
        2.0,
    ),
    "writers_8": (
        "8 writers at once: 2 processes x 4 threads, blocking clients, small steps, "
        "flush({writers_flush})",
        "writers",
        "items/s",
        "higher",
        1.5,
    ),
    "writers_32_aio": (
        "32 coroutine writers on one aio.Client (dm-reverb: its 8 writers above)",
        "writers",
        "items/s",
        "higher",
        1.5,
    ),
    "server_cpu_writers_8": (
        "server CPU per 10,000 small items inserted (8 writers, flush({writers_flush}))",
        "server_cpu",
        "CPU s/10k",
        "lower",
        None,
    ),
    "checkpoint_save_small": (
        "client.checkpoint(), {small} small items",
        "checkpoint",
        "s",
        "lower",
        1.0,
    ),
    "checkpoint_save_frames": (
        "client.checkpoint(), {frames} frame items",
        "checkpoint",
        "s",
        "lower",
        1.0,
    ),
    "checkpoint_restore_small": (
        "restart with checkpointer until serving, {small} small items",
        "checkpoint",
        "s",
        "lower",
        1.0,
    ),
    "checkpoint_restore_frames": (
        "restart with checkpointer until serving, {frames} frame items",
        "checkpoint",
        "s",
        "lower",
        1.0,
    ),
    "memory_small": (
        "server RSS per small item ({small}-item table)",
        "memory",
        "B/item",
        "lower",
        1.0,
    ),
    "memory_frames": (
        "server RSS per frame item ({frames}-item table)",
        "memory",
        "B/item",
        "lower",
        1.0,
    ),
}
RATIO_CONVENTION = (
    "ratio > 1 means reverb_py is better: rates (items/s, samples/s, keys/s) are "
    "reverb_py / dm-reverb; times (s) and memory (B/item) are dm-reverb / reverb_py. "
    "Targets are minimum ratios; margin = ratio / target (>= 1: met)."
)


# =========================================================================== worker side


def _import_reverb(system: str) -> Any:
    if system == "reverb_py":
        import reverb_py as reverb
    else:
        import reverb  # type: ignore[import-not-found,no-redef]
    return reverb


def _make_table(reverb: Any, spec: dict[str, Any]) -> Any:
    """``spec``: name, sampler (uniform | prioritized), max_size, limiter
    (``["min_size", n]`` or ``["spi", samples_per_insert, min_size_to_sample, error_buffer]``)."""
    sampler = (
        reverb.selectors.Prioritized(0.8)
        if spec["sampler"] == "prioritized"
        else reverb.selectors.Uniform()
    )
    limiter = spec.get("limiter", ["min_size", 1])
    if limiter[0] == "min_size":
        rate_limiter = reverb.rate_limiters.MinSize(limiter[1])
    else:
        rate_limiter = reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=limiter[1], min_size_to_sample=limiter[2], error_buffer=limiter[3]
        )
    return reverb.Table(
        name=spec["name"],
        sampler=sampler,
        remover=reverb.selectors.Fifo(),
        max_size=spec["max_size"],
        rate_limiter=rate_limiter,
    )


def _versions(system: str) -> dict[str, Any]:
    names = (
        ("reverb_py", "grpcio", "protobuf", "cramjam", "uvloop", "numpy")
        if system == "reverb_py"
        else ("dm-reverb", "tensorflow", "numpy", "protobuf")
    )
    out: dict[str, Any] = dict(dist_versions(names))
    out["python"] = sys.version.split()[0]
    out["executable"] = sys.executable
    return out


def _server_worker(conn: Any, system: str, args: dict[str, Any]) -> None:
    entered_unix = time.time()
    t0 = time.perf_counter()
    reverb = _import_reverb(system)
    t_import = time.perf_counter()
    tables = [_make_table(reverb, spec) for spec in args["tables"]]
    checkpointer = None
    if args.get("checkpoint_dir"):
        checkpointer = reverb.checkpointers.DefaultCheckpointer(args["checkpoint_dir"])
    t_tables = time.perf_counter()
    server = reverb.Server(tables, port=None, checkpointer=checkpointer)
    t_server = time.perf_counter()
    conn.send(
        {
            "port": server.port,
            "pid": os.getpid(),
            "implementation": getattr(reverb, "IMPLEMENTATION", "c++"),
            "versions": _versions(system),
            "entered_unix": entered_unix,
            "import_s": t_import - t0,
            "server_ctor_s": t_server - t_tables,
        }
    )
    # The 1 ms ticker costs the loop wake-ups: only where asked for (benchmarks.hostile).
    lag = _LoopLag(server) if system == "reverb_py" and args.get("loop_lag") else None
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg[0] == "stop":
            break
        if msg[0] == "loop_lag":
            # The longest the server's event loop kept a 1 ms timer waiting since the last ask.
            conn.send(("ok", lag.take() if lag is not None else None))
            continue
        conn.send(("error", f"unknown server request {msg[0]!r}"))
    try:
        server.stop()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # abandoned streams and TF threads must not hold up the exit


class _LoopLag:
    """Measures a reverb_py server's event loop: a task that asks to wake every
    millisecond records how late it woke (the longest loop iteration meanwhile)."""

    def __init__(self, server: Any) -> None:
        import asyncio

        self.worst = 0.0

        async def watch() -> None:
            loop = asyncio.get_running_loop()
            while True:
                planned = loop.time() + 0.001
                await asyncio.sleep(0.001)
                self.worst = max(self.worst, loop.time() - planned)

        self._future = server._loop_thread.submit(watch())

    def take(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst


class _Proc:
    """What ``benchmarks._workloads.Meter`` needs of a server: its CPU seconds."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid

    def cpu_seconds(self) -> float | None:
        return None if self.pid is None else proc_cpu_seconds(self.pid)


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _count_at(progress: list[tuple[float, int]], t: float) -> int:
    """Items (samples) completed at time ``t``: the last progress point at or before it."""
    n = 0
    for when, count in progress:
        if when > t:
            break
        n = count
    return n


class _ClientWorker:
    """Runs the client side of every workload in a worker process."""

    def __init__(self, system: str, args: dict[str, Any]) -> None:
        self.system = system
        self.reverb = _import_reverb(system)
        self.clients: dict[str, Any] = {}
        self.updates: dict[tuple[str, str, int], list[dict[int, float]]] = {}
        seed = args.get("seed", SEED)
        self.seed = seed
        self.steps = {"small": [wl.small_step()], "frames": wl.frame_steps(wl.frame_pool(64, seed))}
        self.abandoned: list[Any] = []  # writers / generators left blocked by a rate limiter

    def client(self, address: str) -> Any:
        if address not in self.clients:
            self.clients[address] = self.reverb.Client(address)
        return self.clients[address]

    # ------------------------------------------------------------------ commands

    def cmd_hello(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "versions": _versions(self.system),
            "implementation": getattr(self.reverb, "IMPLEMENTATION", "c++"),
        }

    def cmd_forget(self, address: str) -> None:
        self.clients.pop(address, None)

    def cmd_stats(self, address: str, timeout: float = 60) -> dict[str, Any]:
        info = self.client(address).server_info(timeout=timeout)
        return {
            name: {
                "size": t.current_size,
                "inserts": t.rate_limiter_info.insert_stats.completed,
                "samples": t.rate_limiter_info.sample_stats.completed,
            }
            for name, t in info.items()
        }

    def cmd_fill(
        self,
        address: str,
        server_pid: int,
        table: str,
        kind: str,
        n: int,
        prioritized: bool = False,
    ) -> dict[str, Any]:
        prios = np.random.default_rng(self.seed).uniform(0.1, 2.0, 4096) if prioritized else None
        return wl.fill(self.client(address), _Proc(server_pid), table, self.steps[kind], n, prios)

    def cmd_check(self, address: str, table: str, kind: str) -> None:
        wl.check_samples(self.client(address), table, self.steps[kind])

    def cmd_writer_rep(
        self,
        address: str,
        server_pid: int,
        table: str,
        kind: str,
        duration: float,
        length: int = 1,
        block_until: int = wl.FLUSH_EVERY,
    ) -> dict[str, Any]:
        return wl.writer_rep(
            self.client(address),
            _Proc(server_pid),
            table,
            self.steps[kind],
            duration,
            length=length,
            block_until=block_until,
        )

    def cmd_sample_rep(
        self, address: str, server_pid: int, table: str, per_call: int, duration: float
    ) -> dict[str, Any]:
        return wl.sample_rep(self.client(address), _Proc(server_pid), table, per_call, duration)

    def cmd_prepare_mutate(
        self,
        address: str,
        table: str,
        n_keys: int,
        max_samples: int,
        per: int = MUTATE_KEYS_PER_CALL,
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        keys = wl.collect_keys(self.client(address), table, n_keys, max_samples)
        rng = np.random.default_rng(self.seed)
        updates = [
            {int(k): float(p) for k, p in zip(keys[i : i + per], rng.uniform(0.1, 2.0, per))}
            for i in range(0, len(keys) - per + 1, per)
        ]
        if not updates:
            raise RuntimeError(f"only {len(keys)} distinct keys found")
        self.updates[(address, table, per)] = updates
        return {
            "distinct_keys": len(keys),
            "calls_cycled": len(updates),
            "seconds": time.perf_counter() - t0,
        }

    def cmd_mutate_rep(
        self, address: str, server_pid: int, table: str, duration: float
    ) -> dict[str, Any]:
        updates = self.updates[(address, table, MUTATE_KEYS_PER_CALL)]
        return wl.mutate_rep(self.client(address), _Proc(server_pid), table, updates, duration)

    def cmd_mutate_latency_rep(
        self, address: str, server_pid: int, table: str, duration: float, per: int
    ) -> dict[str, Any]:
        updates = self.updates[(address, table, per)]
        return wl.mutate_latency_rep(
            self.client(address), _Proc(server_pid), table, updates, duration
        )

    def cmd_checkpoint(self, address: str) -> dict[str, Any]:
        client = self.client(address)
        t0 = time.perf_counter()
        path = client.checkpoint()
        return {"seconds": time.perf_counter() - t0, "path": str(path)}

    def cmd_wait_serving(
        self, address: str, table: str, n: int, timeout: float = 300
    ) -> dict[str, Any]:
        """``server_info`` until ``table`` has ``n`` items (it has them at the first
        answer when the server loads its checkpoint before serving)."""
        client = self.client(address)
        t0 = time.perf_counter()
        polls = 0
        while True:
            polls += 1
            size = client.server_info(timeout=timeout)[table].current_size
            if size == n:
                return {"polls": polls, "seconds": time.perf_counter() - t0}
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"{table} has {size} items after {timeout} s, expected {n}")
            time.sleep(0.005)

    def _window(
        self, progress: list[tuple[float, int]], t_start: float, t_end: float
    ) -> dict[str, Any]:
        count = _count_at(progress, t_end) - _count_at(progress, t_start)
        return {"count": count, "seconds": t_end - t_start, "rate": count / (t_end - t_start)}

    def _timed_thread(
        self,
        target: Callable[[list[tuple[float, int]], threading.Event], None],
        t_start: float,
        t_end: float,
    ) -> dict[str, Any]:
        progress: list[tuple[float, int]] = []
        stop = threading.Event()
        errors: list[str] = []

        def run() -> None:
            try:
                target(progress, stop)
            except BaseException:  # noqa: BLE001 - reported to the parent
                errors.append(traceback.format_exc())

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        _sleep_until(t_start)
        cpu0 = time.process_time()
        _sleep_until(t_end)
        cpu1 = time.process_time()
        stop.set()
        thread.join(max(0.0, t_end + 0.5 - time.monotonic()))
        if errors:
            raise RuntimeError(errors[0])
        out = self._window(list(progress), t_start, t_end)
        out["cpu_per_wall"] = (cpu1 - cpu0) / (t_end - t_start)
        out["total"] = progress[-1][1] if progress else 0
        out["blocked_at_end"] = thread.is_alive()
        return out

    def cmd_actor(
        self, address: str, table: str, t_go: float, t_start: float, t_end: float
    ) -> dict[str, Any]:
        """Small steps, one length-1 item per step, ``flush(block_until_num_items=16)``
        after each, from ``t_go`` until the first flush after ``t_end``; progress after
        every flush. The writer is left as it is at the end (not flushed: the rate limiter
        may hold its last items forever, as the table is not sampled any more)."""
        client = self.client(address)
        step = self.steps["small"][0]

        def loop(progress: list[tuple[float, int]], stop: threading.Event) -> None:
            _sleep_until(t_go)
            writer = client.trajectory_writer(num_keep_alive_refs=wl.SEQ_LEN)
            self.abandoned.append(writer)
            writer.append(step)
            history = writer.history
            writer.create_item(table, 1.0, {k: history[k][-1:] for k in wl.FIELDS})
            n = 1
            progress.append((time.monotonic(), 0))
            while not stop.is_set():
                writer.flush(block_until_num_items=wl.FLUSH_EVERY)
                now = time.monotonic()
                progress.append((now, n))
                if now >= t_end:
                    break
                writer.append(step)
                writer.create_item(table, 1.0, {k: history[k][-1:] for k in wl.FIELDS})
                n += 1

        return self._timed_thread(loop, t_start, t_end)

    def cmd_writers(
        self,
        address: str,
        table: str,
        threads: int,
        t_go: float,
        t_start: float,
        t_end: float,
        block_until: int = wl.FLUSH_EVERY,
    ) -> dict[str, Any]:
        """``threads`` threads of this process, each its own writer on one shared client,
        run :func:`benchmarks._workloads.writer_loop` (``flush(block_until)`` after each
        item) from ``t_go`` to ``t_end``; items confirmed in ``[t_start, t_end]`` summed
        over the threads."""
        client = self.client(address)
        step = self.steps["small"][0]
        progress: list[list[tuple[float, int]]] = [[] for _ in range(threads)]
        stop = threading.Event()
        failures: list[str] = []

        def run(i: int) -> None:
            try:
                _sleep_until(t_go)
                with client.trajectory_writer(num_keep_alive_refs=wl.SEQ_LEN) as writer:
                    wl.writer_loop(
                        writer, table, step, progress[i], stop.is_set, t_end, block_until
                    )
            except BaseException:  # noqa: BLE001 - reported to the parent
                failures.append(traceback.format_exc())

        workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
        for t in workers:
            t.start()
        _sleep_until(t_start)
        cpu0 = time.process_time()
        _sleep_until(t_end)
        cpu1 = time.process_time()
        for t in workers:
            t.join(max(0.0, t_end + 30 - time.monotonic()))
        stop.set()
        if failures:
            raise RuntimeError(failures[0])
        windows = [self._window(list(p), t_start, t_end) for p in progress]
        count = sum(w["count"] for w in windows)
        return {
            "count": count,
            "rate": count / (t_end - t_start),
            "per_writer": [w["rate"] for w in windows],
            "cpu_per_wall": (cpu1 - cpu0) / (t_end - t_start),
        }

    def cmd_aio_writers(
        self,
        address: str,
        table: str,
        coroutines: int,
        t_go: float,
        t_start: float,
        t_end: float,
        block_until: int = wl.FLUSH_EVERY,
    ) -> dict[str, Any]:
        """``coroutines`` asyncio writers on one ``reverb_py.aio.Client`` in one event loop
        (a thread of this process), as :meth:`cmd_writers` counts them."""
        import asyncio

        aio = self.reverb.aio
        step = self.steps["small"][0]
        progress: list[list[tuple[float, int]]] = [[] for _ in range(coroutines)]
        cpu: dict[str, float] = {}

        async def one(client: Any, i: int) -> None:
            writer = await client.trajectory_writer(num_keep_alive_refs=wl.SEQ_LEN)
            async with writer:
                await wl.async_writer_loop(writer, table, step, progress[i], t_end, block_until)

        async def meter() -> None:
            await asyncio.sleep(max(0.0, t_start - time.monotonic()))
            cpu["start"] = time.process_time()
            await asyncio.sleep(max(0.0, t_end - time.monotonic()))
            cpu["end"] = time.process_time()

        async def main() -> None:
            async with aio.Client(address) as client:
                await asyncio.sleep(max(0.0, t_go - time.monotonic()))
                await asyncio.gather(meter(), *(one(client, i) for i in range(coroutines)))

        asyncio.run(main())
        windows = [self._window(list(p), t_start, t_end) for p in progress]
        count = sum(w["count"] for w in windows)
        return {
            "count": count,
            "rate": count / (t_end - t_start),
            "per_writer": [w["rate"] for w in windows],
            "cpu_per_wall": (cpu["end"] - cpu["start"]) / (t_end - t_start),
        }

    def cmd_learner(
        self, address: str, table: str, batch: int, t_go: float, t_start: float, t_end: float
    ) -> dict[str, Any]:
        """``client.sample(table, batch, emit_timesteps=False)`` back to back from ``t_go``
        until the first full batch after ``t_end``; progress every 32 samples."""
        client = self.client(address)

        def loop(progress: list[tuple[float, int]], stop: threading.Event) -> None:
            _sleep_until(t_go)
            n = 0
            progress.append((time.monotonic(), 0))
            while not stop.is_set():
                samples = client.sample(table, num_samples=batch, emit_timesteps=False)
                self.abandoned.append(samples)
                for _ in samples:
                    n += 1
                    if n % 32 == 0:
                        progress.append((time.monotonic(), n))
                self.abandoned.pop()
                if time.monotonic() >= t_end:
                    break

        return self._timed_thread(loop, t_start, t_end)


def _client_worker(conn: Any, system: str, args: dict[str, Any]) -> None:
    worker = _ClientWorker(system, args)
    conn.send(worker.cmd_hello())
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        name, kwargs = msg
        if name == "stop":
            break
        try:
            result = getattr(worker, "cmd_" + name)(**kwargs)
            conn.send(("ok", result))
        except Exception:  # noqa: BLE001 - reported to the parent
            conn.send(("error", traceback.format_exc()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # blocked threads (abandoned writers, samplers) must not hold up the exit


def worker_main(role: str, system: str, fd: int, args_json: str) -> int:
    from multiprocessing.connection import Connection

    conn = Connection(fd)
    args = json.loads(args_json)
    try:
        if role == "server":
            _server_worker(conn, system, args)
        else:
            _client_worker(conn, system, args)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        try:
            conn.send(("error", traceback.format_exc()))
        finally:
            os._exit(1)
    return 0


# =========================================================================== parent side


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Worker:
    """A worker subprocess of one system's interpreter, with a duplex connection."""

    def __init__(
        self, system: str, python: str, role: str, args: dict[str, Any], log_dir: str, name: str
    ) -> None:
        self.system, self.role, self.name = system, role, name
        parent, child = multiprocessing.Pipe()
        fd = child.fileno()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PROJECT_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        env["PYTHONUNBUFFERED"] = "1"
        env["GRPC_VERBOSITY"] = "ERROR"
        if system == "dm_reverb":
            env["TF_CPP_MIN_LOG_LEVEL"] = "3"
            env["CUDA_VISIBLE_DEVICES"] = ""
        self.log_path = os.path.join(log_dir, f"{system}-{name}.log")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.started_unix = time.time()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [
                python,
                "-m",
                "benchmarks.compare",
                "--worker",
                role,
                "--system",
                system,
                "--fd",
                str(fd),
                "--worker-args",
                json.dumps(args),
            ],
            pass_fds=(fd,),
            cwd=str(PROJECT_ROOT),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        child.close()
        self.conn = parent
        self.hello: dict[str, Any] | None = None
        self.ready_at: float | None = None

    # ------------------------------------------------------------------ plumbing

    def _log_tail(self, n: int = 40) -> str:
        try:
            lines = pathlib.Path(self.log_path).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def _recv(self, timeout: float) -> Any:
        if not self.conn.poll(timeout):
            raise RuntimeError(
                f"{self.system}/{self.name}: no answer within {timeout:.0f} s; "
                f"log tail:\n{self._log_tail()}"
            )
        try:
            return self.conn.recv()
        except EOFError:
            raise RuntimeError(
                f"{self.system}/{self.name} exited (rc {self.proc.poll()}); "
                f"log tail:\n{self._log_tail()}"
            ) from None

    def wait_ready(self, timeout: float = 300) -> dict[str, Any]:
        if self.hello is None:
            msg = self._recv(timeout)
            if isinstance(msg, tuple) and msg and msg[0] == "error":
                raise RuntimeError(f"{self.system}/{self.name} failed to start:\n{msg[1]}")
            self.hello = msg
            self.ready_at = time.monotonic()
        return self.hello

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def address(self) -> str:
        assert self.hello is not None
        return f"localhost:{self.hello['port']}"

    def send(self, name: str, **kwargs: Any) -> None:
        self.conn.send((name, kwargs))

    def result(self, timeout: float = 300) -> Any:
        status, value = self._recv(timeout)
        if status != "ok":
            raise RuntimeError(f"{self.system}/{self.name}: {value}")
        return value

    def call(self, name: str, timeout: float = 300, **kwargs: Any) -> Any:
        self.send(name, **kwargs)
        return self.result(timeout)

    def rss_kib(self) -> int | None:
        return proc_status_kib(self.pid, "VmRSS")

    def stop(self, timeout: float = 15) -> None:
        if self.proc.poll() is None:
            try:
                self.conn.send(("stop", {}) if self.role == "client" else ("stop",))
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.conn.close()
        self._log.close()


def _alternate(reps: int, fn: Callable[[str, int], Any]) -> dict[str, list[Any]]:
    """Repetition r runs both systems, reverb_py first when r is even, else dm-reverb first."""
    runs: dict[str, list[Any]] = {s: [] for s in SYSTEMS}
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            runs[system].append(fn(system, rep))
    return runs


def _dir_bytes(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, name))
            except OSError:
                pass
    return total


def _result(
    name: str, cfg: dict[str, Any], values: dict[str, float], details: dict[str, Any]
) -> dict[str, Any]:
    label, group, unit, better, target = WORKLOADS[name]
    label = label.format(
        small=f"{cfg['small_items']:,}",
        frames=f"{cfg['frame_items']:,}",
        sample_frames=f"{cfg['sample_frame_items']:,}",
        writers_flush=cfg["writers"]["flush"],
    )
    py, dm = values["reverb_py"], values["dm_reverb"]
    if better == "higher":
        ratio = py / dm if dm else float("inf")
        definition = "reverb_py / dm-reverb"
    else:
        ratio = dm / py if py else float("inf")
        definition = "dm-reverb / reverb_py"
    return {
        "label": label,
        "group": group,
        "unit": unit,
        "better": better,
        "reverb_py": {"value": py, **details.get("reverb_py", {})},
        "dm_reverb": {"value": dm, **details.get("dm_reverb", {})},
        "ratio": ratio,
        "ratio_definition": definition,
        "target": None
        if target is None
        else {"min_ratio": target, "met": ratio >= target, "margin": ratio / target},
    }


class Compare:
    """The parent: starts the workers, runs the phases, collects the results."""

    def __init__(
        self, cfg: dict[str, Any], pythons: dict[str, str], log_dir: str, ckpt_root: str
    ) -> None:
        self.cfg = cfg
        self.pythons = pythons
        self.log_dir = log_dir
        self.ckpt_root = ckpt_root
        self.workers: list[Worker] = []
        self.results: dict[str, Any] = {}
        self.raw: dict[str, Any] = {}
        self.memory: dict[str, Any] = {s: {} for s in SYSTEMS}
        self.fills: dict[str, Any] = {s: {} for s in SYSTEMS}
        self.startup: dict[str, Any] = {s: {} for s in SYSTEMS}
        self.warnings: list[str] = []

    # ------------------------------------------------------------------ workers

    def start(self, system: str, role: str, name: str, args: dict[str, Any]) -> Worker:
        w = Worker(system, self.pythons[system], role, args, self.log_dir, name)
        self.workers.append(w)
        return w

    def stop_all(self) -> None:
        for w in self.workers:
            try:
                w.stop()
            except Exception as error:  # noqa: BLE001
                _say(f"  (stopping {w.system}/{w.name}: {error})")
        self.workers = []

    def main_specs(self) -> list[dict[str, Any]]:
        small, frames = self.cfg["small_items"], self.cfg["frame_items"]
        sample_frames = self.cfg["sample_frame_items"]
        return [
            {"name": "uniform", "sampler": "uniform", "max_size": small},
            {"name": "prioritized", "sampler": "prioritized", "max_size": small},
            {"name": "frames_uniform", "sampler": "uniform", "max_size": sample_frames},
            {"name": "frames_prioritized", "sampler": "prioritized", "max_size": sample_frames},
            {"name": "insert", "sampler": "uniform", "max_size": 10**6},
            {"name": "seq", "sampler": "uniform", "max_size": 10**6},
            {"name": "insert_frames", "sampler": "uniform", "max_size": frames},
        ]

    def ckpt_spec(self, workload: str) -> dict[str, Any]:
        n = self.cfg["small_items"] if workload == "small" else self.cfg["frame_items"]
        return {"name": "replay", "sampler": "uniform", "max_size": n}

    def actor_table(self, k: int, rep: int) -> str:
        return f"actors{k}_r{rep}"

    def actor_specs(self) -> list[dict[str, Any]]:
        a = self.cfg["actors"]
        limiter = ["spi", a["samples_per_insert"], a["min_size_to_sample"], a["error_buffer"]]
        return [
            {
                "name": self.actor_table(k, rep),
                "sampler": "uniform",
                "max_size": a["max_size"],
                "limiter": limiter,
            }
            for k in a["counts"]
            for rep in range(self.cfg["repeats"])
        ]

    def writers_table(self, kind: str, rep: int) -> str:
        return f"{kind}_r{rep}"

    def writers_specs(self) -> list[dict[str, Any]]:
        return [
            {"name": self.writers_table(kind, rep), "sampler": "uniform", "max_size": 10**6}
            for kind in ("threads", "aio")
            for rep in range(self.cfg["repeats"])
        ]

    def launch(self) -> None:
        t0 = time.monotonic()
        self.main: dict[str, Worker] = {}
        self.ctl: dict[str, Worker] = {}
        self.ckpt: dict[str, dict[str, Worker]] = {}
        self.actor_srv: dict[str, Worker] = {}
        self.actors: dict[str, list[Worker]] = {}
        self.learner: dict[str, Worker] = {}
        self.writers_srv: dict[str, Worker] = {}
        n_actors = max(self.cfg["actors"]["counts"])
        client_args = {"seed": self.cfg["seed"]}
        for s in SYSTEMS:
            self.main[s] = self.start(s, "server", "main-server", {"tables": self.main_specs()})
            self.ctl[s] = self.start(s, "client", "client", client_args)
            self.ckpt[s] = {}
            for w in ("small", "frames"):
                directory = os.path.join(self.ckpt_root, s, w)
                os.makedirs(directory, exist_ok=True)
                self.ckpt[s][w] = self.start(
                    s,
                    "server",
                    f"ckpt-{w}-server",
                    {"tables": [self.ckpt_spec(w)], "checkpoint_dir": directory},
                )
            self.actor_srv[s] = self.start(
                s, "server", "actor-server", {"tables": self.actor_specs()}
            )
            self.actors[s] = [
                self.start(s, "client", f"actor{i}", client_args) for i in range(n_actors)
            ]
            self.learner[s] = self.start(s, "client", "learner", client_args)
            if s == "reverb_py":
                # The coroutine writers get a process of their own: in one that also
                # used a blocking client, gRPC's asyncio poller wakes both event loops
                # for every event (see the benchmarks README).
                self.aio_writers = self.start(s, "client", "aio-writers", client_args)
            self.writers_srv[s] = self.start(
                s, "server", "writers-server", {"tables": self.writers_specs()}
            )
        for w in self.workers:
            w.wait_ready()
        for s in SYSTEMS:
            hello = self.main[s].hello or {}
            self.startup[s]["versions"] = hello.get("versions")
            self.startup[s]["server_implementation"] = hello.get("implementation")
            self.startup[s]["client_implementation"] = (self.ctl[s].hello or {}).get(
                "implementation"
            )
            self.startup[s]["main_server_ready_s"] = (self.main[s].ready_at or 0) - self.main[
                s
            ].started
        if self.startup["reverb_py"]["server_implementation"] != "cython":
            self.warnings.append(
                "reverb_py server IMPLEMENTATION="
                f"{self.startup['reverb_py']['server_implementation']!r}"
            )
        _say(f"  started {len(self.workers)} worker processes in {time.monotonic() - t0:.1f} s")
        time.sleep(0.5)

    # ------------------------------------------------------------------ phases

    def fill_phase(self) -> None:
        small, frames = self.cfg["small_items"], self.cfg["frame_items"]
        sample_frames = self.cfg["sample_frame_items"]
        fills = (
            ("uniform", "small", small, False),
            ("prioritized", "small", small, True),
            ("frames_uniform", "frames", sample_frames, False),
            ("frames_prioritized", "frames", sample_frames, True),
        )
        for s in SYSTEMS:
            ctl, srv = self.ctl[s], self.main[s]
            mem = self.memory[s]
            mem["main_baseline_kib"] = srv.rss_kib()
            for table, kind, n, prio in fills:
                before = srv.rss_kib()
                res = ctl.call(
                    "fill",
                    address=srv.address,
                    server_pid=srv.pid,
                    table=table,
                    kind=kind,
                    n=n,
                    prioritized=prio,
                )
                after = srv.rss_kib()
                self.fills[s][table] = res
                mem[f"main_{table}"] = {
                    "before_kib": before,
                    "after_kib": after,
                    "items": n,
                    "bytes_per_item": (after - before) * 1024 / n if before and after else None,
                }
                ctl.call("check", address=srv.address, table=table, kind=kind)
            for w, kind, n in (("small", "small", small), ("frames", "frames", frames)):
                srv = self.ckpt[s][w]
                before = srv.rss_kib()
                res = ctl.call(
                    "fill", address=srv.address, server_pid=srv.pid, table="replay", kind=kind, n=n
                )
                time.sleep(0.2)
                after = srv.rss_kib()
                self.fills[s][f"ckpt_{w}"] = res
                mem[f"dedicated_{w}"] = {
                    "before_kib": before,
                    "after_kib": after,
                    "items": n,
                    "bytes_per_item": (after - before) * 1024 / n if before and after else None,
                }
                ctl.call("check", address=srv.address, table="replay", kind=kind)
            sizes = ctl.call("stats", address=self.main[s].address)
            for table, _, n, _ in fills:
                assert sizes[table]["size"] == n, (s, table, sizes[table])
            _say(
                f"  {SYSTEM_LABELS[s]}: filled; small fill "
                f"{fmt_rate(self.fills[s]['uniform']['items_per_s'])} items/s, frame fill "
                f"{fmt_rate(self.fills[s]['frames_uniform']['items_per_s'])} items/s; RSS per "
                f"item: small {mem['dedicated_small']['bytes_per_item']:,.0f} B, frames "
                f"{mem['dedicated_frames']['bytes_per_item']:,.0f} B"
            )
        values: dict[str, dict[str, float]] = {}
        for w in ("small", "frames"):
            values[w] = {s: self.memory[s][f"dedicated_{w}"]["bytes_per_item"] for s in SYSTEMS}
            details = {
                s: {
                    "main_server_items": self.memory[s][
                        f"main_{'uniform' if w == 'small' else 'frames_uniform'}"
                    ]["items"],
                    "main_server_bytes_per_item": self.memory[s][
                        f"main_{'uniform' if w == 'small' else 'frames_uniform'}"
                    ]["bytes_per_item"],
                    "main_server_prioritized_bytes_per_item": self.memory[s][
                        f"main_{'prioritized' if w == 'small' else 'frames_prioritized'}"
                    ]["bytes_per_item"],
                    **self.memory[s][f"dedicated_{w}"],
                }
                for s in SYSTEMS
            }
            self.results[f"memory_{w}"] = _result(f"memory_{w}", self.cfg, values[w], details)

    def _single(
        self,
        name: str,
        unit: str,
        with_bytes: bool,
        rep_fn: Callable[[str], dict[str, Any]],
        warmup: Callable[[str], Any] | None = None,
    ) -> None:
        if warmup is not None:
            for s in SYSTEMS:
                warmup(s)
        runs = _alternate(self.cfg["repeats"], lambda s, _rep: rep_fn(s))
        summary = {s: wl._summarize(runs[s], unit, with_bytes) for s in SYSTEMS}
        values = {s: summary[s]["rate"] for s in SYSTEMS}
        details = {
            s: {k: v for k, v in summary[s].items() if k not in ("rate", "unit")} for s in SYSTEMS
        }
        self.results[name] = _result(name, self.cfg, values, details)
        self._log(name)

    def _log(self, name: str) -> None:
        r = self.results[name]
        unit = r["unit"]

        def fmt(v: float) -> str:
            if unit == "s":
                return f"{v:.2f} s"
            if unit in ("ms", "CPU s/10k"):
                return f"{v:.3f} {unit}"
            if unit == "B/item":
                return f"{v:,.0f} B/item"
            return f"{fmt_rate(v)} {unit}"

        _say(
            f"  {name:<27} reverb_py {fmt(r['reverb_py']['value']):>15}   dm-reverb "
            f"{fmt(r['dm_reverb']['value']):>15}   ratio {r['ratio']:6.2f}  ({_verdict(r)})"
        )

    def client_phase(self) -> None:
        cfg = self.cfg
        d = cfg["duration"]
        for name, table, per_call in (
            ("sample_small_uniform", "uniform", cfg["sample_per_call"]),
            ("sample_small_prioritized", "prioritized", cfg["sample_per_call"]),
            ("sample_frames_uniform", "frames_uniform", cfg["frame_sample_per_call"]),
            ("sample_frames_prioritized", "frames_prioritized", cfg["frame_sample_per_call"]),
        ):

            def rep(s: str, table: str = table, per_call: int = per_call) -> dict[str, Any]:
                srv = self.main[s]
                return self.ctl[s].call(
                    "sample_rep",
                    address=srv.address,
                    server_pid=srv.pid,
                    table=table,
                    per_call=per_call,
                    duration=d,
                )

            def warm(s: str, table: str = table) -> Any:
                srv = self.main[s]
                return self.ctl[s].call(
                    "sample_rep",
                    address=srv.address,
                    server_pid=srv.pid,
                    table=table,
                    per_call=200,
                    duration=0.0,
                )

            self._single(name, "samples/s", True, rep, warm)

        prep = {}
        for s in SYSTEMS:
            for per in (MUTATE_LATENCY_KEYS, MUTATE_KEYS_PER_CALL):  # the record: 1,000
                prep[s] = self.ctl[s].call(
                    "prepare_mutate",
                    address=self.main[s].address,
                    table="prioritized",
                    n_keys=cfg["mutate_keys"],
                    max_samples=20 * cfg["small_items"],
                    per=per,
                )

        def mutate(s: str) -> dict[str, Any]:
            srv = self.main[s]
            return self.ctl[s].call(
                "mutate_rep",
                address=srv.address,
                server_pid=srv.pid,
                table="prioritized",
                duration=d,
            )

        self._single(
            "mutate",
            "keys/s",
            False,
            mutate,
            lambda s: self.ctl[s].call(
                "mutate_rep",
                address=self.main[s].address,
                server_pid=self.main[s].pid,
                table="prioritized",
                duration=0.0,
            ),
        )
        for s in SYSTEMS:
            self.results["mutate"][s]["prepare"] = prep[s]

        per = MUTATE_LATENCY_KEYS

        def latency(s: str, _rep: int) -> dict[str, Any]:
            srv = self.main[s]
            return self.ctl[s].call(
                "mutate_latency_rep",
                address=srv.address,
                server_pid=srv.pid,
                table="prioritized",
                duration=d,
                per=per,
            )

        runs = _alternate(cfg["repeats"], latency)
        values = {s: median([r["latency_ms"] for r in runs[s]]) for s in SYSTEMS}
        details = {
            s: {
                "runs": [r["latency_ms"] for r in runs[s]],
                "p10_runs": [r["latency_ms_p10"] for r in runs[s]],
                "p90_runs": [r["latency_ms_p90"] for r in runs[s]],
                "calls_per_run": [r["count"] for r in runs[s]],
                "server_cpu_per_wall_s": median(
                    [r["server_cpu"] / r["seconds"] for r in runs[s] if r["server_cpu"] is not None]
                    or [0.0]
                ),
            }
            for s in SYSTEMS
        }
        self.results["mutate_256_latency"] = _result("mutate_256_latency", cfg, values, details)
        self._log("mutate_256_latency")

        for name, table, kind, length, block_until in (
            ("insert_small", "insert", "small", 1, wl.FLUSH_EVERY),
            ("insert_frames", "insert_frames", "frames", 1, wl.FLUSH_EVERY),
            ("insert_seq", "seq", "small", wl.SEQ_LEN, wl.FLUSH_EVERY),
            ("insert_small_flush5", "insert", "small", 1, 5),
            ("insert_frames_flush5", "insert_frames", "frames", 1, 5),
            ("insert_seq_flush5", "seq", "small", wl.SEQ_LEN, 5),
        ):

            def ins(
                s: str,
                table: str = table,
                kind: str = kind,
                length: int = length,
                block_until: int = block_until,
            ) -> dict[str, Any]:
                srv = self.main[s]
                return self.ctl[s].call(
                    "writer_rep",
                    address=srv.address,
                    server_pid=srv.pid,
                    table=table,
                    kind=kind,
                    duration=d,
                    length=length,
                    block_until=block_until,
                )

            self._single(name, "items/s", True, ins)
            if name == "insert_small":
                small = self.results[name]
                cpu = {
                    s: (small[s]["server_cpu_per_wall_s"] or 0.0) / small[s]["value"] * 1e4
                    for s in SYSTEMS
                }
                self.results["server_cpu_insert_small"] = _result(
                    "server_cpu_insert_small", cfg, cpu, {}
                )
                self._log("server_cpu_insert_small")
        # The main server's RSS at the end (after the insert workloads), for the record.
        for s in SYSTEMS:
            self.memory[s]["main_after_all_kib"] = self.main[s].rss_kib()

    def actors_phase(self) -> None:
        a = self.cfg["actors"]
        for k in a["counts"]:

            def rep(s: str, r: int, k: int = k) -> dict[str, Any]:
                srv = self.actor_srv[s]
                table = self.actor_table(k, r)
                t_go = time.monotonic() + 0.2
                t_start = t_go + a["warmup"]
                t_end = t_start + a["duration"]
                actors = self.actors[s][:k]
                for w in actors:
                    w.send(
                        "actor",
                        address=srv.address,
                        table=table,
                        t_go=t_go,
                        t_start=t_start,
                        t_end=t_end,
                    )
                self.learner[s].send(
                    "learner",
                    address=srv.address,
                    table=table,
                    batch=LEARNER_BATCH,
                    t_go=t_go,
                    t_start=t_start,
                    t_end=t_end,
                )
                _sleep_until(t_start)
                cpu0 = proc_cpu_seconds(srv.pid)
                _sleep_until(t_end)
                cpu1 = proc_cpu_seconds(srv.pid)
                window = t_end - t_start
                timeout = a["warmup"] + a["duration"] + 120
                actor_res = [w.result(timeout) for w in actors]
                learner_res = self.learner[s].result(timeout)
                stats = self.ctl[s].call("stats", address=srv.address)[table]
                return {
                    "inserts_per_s": sum(x["rate"] for x in actor_res),
                    "samples_per_s": learner_res["rate"],
                    "actors": actor_res,
                    "learner": learner_res,
                    "server_cpu_per_wall": None
                    if cpu0 is None or cpu1 is None
                    else (cpu1 - cpu0) / window,
                    "table_after": stats,
                }

            runs = _alternate(self.cfg["repeats"], rep)
            values = {s: median([r["inserts_per_s"] for r in runs[s]]) for s in SYSTEMS}
            details = {
                s: {
                    "runs": [r["inserts_per_s"] for r in runs[s]],
                    "samples_per_s": median([r["samples_per_s"] for r in runs[s]]),
                    "samples_per_s_runs": [r["samples_per_s"] for r in runs[s]],
                    "server_cpu_per_wall_s": median(
                        [r["server_cpu_per_wall"] or 0.0 for r in runs[s]]
                    ),
                    "learner_cpu_per_wall_s": median(
                        [r["learner"]["cpu_per_wall"] for r in runs[s]]
                    ),
                    "actor_cpu_per_wall_s": median(
                        [sum(x["cpu_per_wall"] for x in r["actors"]) for r in runs[s]]
                    ),
                    "rep_details": runs[s],
                }
                for s in SYSTEMS
            }
            name = f"actors_{k}"
            res = _result(name, self.cfg, values, details)
            py_s = res["reverb_py"]["samples_per_s"]
            dm_s = res["dm_reverb"]["samples_per_s"]
            res["ratio_samples"] = py_s / dm_s if dm_s else float("inf")
            # The target is on total throughput: both inserts and samples must reach it.
            basis = min(res["ratio"], res["ratio_samples"])
            t = res["target"]
            t.update(
                basis="min(items inserted ratio, samples ratio)",
                basis_ratio=basis,
                met=basis >= t["min_ratio"],
                margin=basis / t["min_ratio"],
            )
            self.results[name] = res
            self._log(name)
            _say(
                f"  {'':<27} samples/s: reverb_py {fmt_rate(py_s):>9}, dm-reverb "
                f"{fmt_rate(dm_s):>9}, ratio {res['ratio_samples']:.2f}"
            )

    def writers_phase(self) -> None:
        """8 blocking writers (2 processes x 4 threads) on both systems, and 32 coroutine
        writers on one reverb_py ``aio.Client``; every repetition on fresh tables."""
        w = self.cfg["writers"]
        procs, threads = w["processes"], w["threads"]

        def window() -> tuple[float, float, float]:
            t_go = time.monotonic() + 0.2
            t_start = t_go + w["warmup"]
            return t_go, t_start, t_start + w["duration"]

        def measure(srv: Worker, start: Callable[[float, float, float], list[Worker]]) -> Any:
            t_go, t_start, t_end = window()
            clients = start(t_go, t_start, t_end)
            _sleep_until(t_start)
            cpu0 = proc_cpu_seconds(srv.pid)
            _sleep_until(t_end)
            cpu1 = proc_cpu_seconds(srv.pid)
            timeout = w["warmup"] + w["duration"] + 120
            res = [c.result(timeout) for c in clients]
            rate = sum(r["rate"] for r in res)
            seconds = t_end - t_start
            cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
            return {
                "rate": rate,
                "server_cpu_per_wall": None if cpu is None else cpu / seconds,
                "server_cpu_per_10k": None
                if cpu is None or not rate
                else cpu / (rate * seconds) * 1e4,
                "clients": res,
            }

        def rep(s: str, r: int) -> dict[str, Any]:
            srv = self.writers_srv[s]

            def threaded(t_go: float, t_start: float, t_end: float) -> list[Worker]:
                clients = self.actors[s][:procs]
                for c in clients:
                    c.send(
                        "writers",
                        address=srv.address,
                        table=self.writers_table("threads", r),
                        threads=threads,
                        block_until=w["flush"],
                        t_go=t_go,
                        t_start=t_start,
                        t_end=t_end,
                    )
                return clients

            out = {"threads": measure(srv, threaded)}
            if s == "reverb_py":

                def coroutines(t_go: float, t_start: float, t_end: float) -> list[Worker]:
                    client = self.aio_writers
                    client.send(
                        "aio_writers",
                        address=srv.address,
                        table=self.writers_table("aio", r),
                        coroutines=w["coroutines"],
                        block_until=w["flush"],
                        t_go=t_go,
                        t_start=t_start,
                        t_end=t_end,
                    )
                    return [client]

                out["aio"] = measure(srv, coroutines)
            return out

        runs = _alternate(self.cfg["repeats"], rep)

        def summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                "runs": [x["rate"] for x in rs],
                "server_cpu_per_wall_s": median([x["server_cpu_per_wall"] or 0.0 for x in rs]),
                "server_cpu_per_10k": median([x["server_cpu_per_10k"] or 0.0 for x in rs]),
                "client_cpu_per_wall_s": median(
                    [sum(c["cpu_per_wall"] for c in x["clients"]) for x in rs]
                ),
                "rep_details": rs,
            }

        threads_runs = {s: [r["threads"] for r in runs[s]] for s in SYSTEMS}
        aio_runs = [r["aio"] for r in runs["reverb_py"]]
        values = {s: median([x["rate"] for x in threads_runs[s]]) for s in SYSTEMS}
        details = {s: summary(threads_runs[s]) for s in SYSTEMS}
        self.results["writers_8"] = _result("writers_8", self.cfg, values, details)
        self._log("writers_8")
        aio_values = {
            "reverb_py": median([x["rate"] for x in aio_runs]),
            "dm_reverb": values["dm_reverb"],
        }
        aio_details = {"reverb_py": summary(aio_runs), "dm_reverb": {"same_as": "writers_8"}}
        self.results["writers_32_aio"] = _result(
            "writers_32_aio", self.cfg, aio_values, aio_details
        )
        self._log("writers_32_aio")
        cpu_values = {s: details[s]["server_cpu_per_10k"] for s in SYSTEMS}
        self.results["server_cpu_writers_8"] = _result(
            "server_cpu_writers_8",
            self.cfg,
            cpu_values,
            {"reverb_py": {"aio_32": summary(aio_runs)["server_cpu_per_10k"]}},
        )
        self._log("server_cpu_writers_8")

    def checkpoint_phase(self) -> None:
        n = {"small": self.cfg["small_items"], "frames": self.cfg["frame_items"]}
        for w in ("small", "frames"):

            def save(s: str, _rep: int, w: str = w) -> dict[str, Any]:
                srv = self.ckpt[s][w]
                out = self.ctl[s].call("checkpoint", address=srv.address)
                out["bytes"] = _dir_bytes(out["path"]) if os.path.isdir(out["path"]) else None
                return out

            runs = _alternate(self.cfg["repeats"], save)
            values = {s: median([r["seconds"] for r in runs[s]]) for s in SYSTEMS}
            details = {
                s: {
                    "runs": [r["seconds"] for r in runs[s]],
                    "checkpoint_bytes": runs[s][-1]["bytes"],
                    "checkpoint_dir_bytes": _dir_bytes(os.path.join(self.ckpt_root, s, w)),
                }
                for s in SYSTEMS
            }
            self.results[f"checkpoint_save_{w}"] = _result(
                f"checkpoint_save_{w}", self.cfg, values, details
            )
            self._log(f"checkpoint_save_{w}")
        for s in SYSTEMS:
            for w in ("small", "frames"):
                self.ctl[s].call("forget", address=self.ckpt[s][w].address)
                self.ckpt[s][w].stop()
                self.workers.remove(self.ckpt[s][w])
        for w in ("small", "frames"):

            def restore(s: str, rep: int, w: str = w) -> dict[str, Any]:
                directory = os.path.join(self.ckpt_root, s, w)
                srv = self.start(
                    s,
                    "server",
                    f"restore-{w}-{rep}",
                    {"tables": [self.ckpt_spec(w)], "checkpoint_dir": directory},
                )
                try:
                    hello = srv.wait_ready()
                    waited = self.ctl[s].call(
                        "wait_serving", address=srv.address, table="replay", n=n[w]
                    )
                    seconds = time.monotonic() - srv.started
                    rss = srv.rss_kib()
                    self.ctl[s].call("forget", address=srv.address)
                finally:
                    srv.stop()
                    self.workers.remove(srv)
                return {
                    "seconds": seconds,
                    "spawn_and_imports_s": hello["entered_unix"]
                    - srv.started_unix
                    + hello["import_s"],
                    "import_s": hello["import_s"],
                    "server_ctor_s": hello["server_ctor_s"],
                    "until_first_full_server_info_s": waited["seconds"],
                    "server_info_polls": waited["polls"],
                    "rss_after_restore_kib": rss,
                }

            runs = _alternate(self.cfg["repeats"], restore)
            values = {s: median([r["seconds"] for r in runs[s]]) for s in SYSTEMS}
            details = {
                s: {
                    "runs": [r["seconds"] for r in runs[s]],
                    "server_ctor_s": median([r["server_ctor_s"] for r in runs[s]]),
                    "import_s": median([r["import_s"] for r in runs[s]]),
                    "spawn_and_imports_s": median([r["spawn_and_imports_s"] for r in runs[s]]),
                    "rep_details": runs[s],
                }
                for s in SYSTEMS
            }
            name = f"checkpoint_restore_{w}"
            res = _result(name, self.cfg, values, details)
            py_c, dm_c = res["reverb_py"]["server_ctor_s"], res["dm_reverb"]["server_ctor_s"]
            res["ratio_server_ctor"] = dm_c / py_c if py_c else float("inf")
            self.results[name] = res
            self._log(name)
            _say(
                f"  {'':<27} of which Server(..., checkpointer) constructor: reverb_py "
                f"{py_c:.2f} s, dm-reverb {dm_c:.2f} s (ratio {res['ratio_server_ctor']:.2f})"
            )


ORDER = tuple(WORKLOADS)


def _verdict(r: dict[str, Any]) -> str:
    t = r["target"]
    if t is None:
        return "no target"
    return f"target {t['min_ratio']:g}: {'met' if t['met'] else 'MISSED'}"


def _run(args: argparse.Namespace, cfg: dict[str, Any], dm_python: str) -> int:
    out = args.out or str(RESULTS_DIR / ("compare_quick.json" if args.quick else "compare.json"))
    info = machine_info()
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix="reverb_compare_")
    log_dir = os.path.join(root, "logs")
    os.makedirs(log_dir)
    ckpt_root = os.path.join(root, "checkpoints")
    _say(f"# reverb_py vs dm-reverb; dm-reverb python {dm_python}; logs in {log_dir}")
    cmp = Compare(cfg, {"reverb_py": sys.executable, "dm_reverb": dm_python}, log_dir, ckpt_root)
    phases: dict[str, float] = {}
    ok = False
    try:
        for phase, fn in (
            ("launch", cmp.launch),
            ("fill", cmp.fill_phase),
            ("single_client", cmp.client_phase),
            ("actors", cmp.actors_phase),
            ("writers", cmp.writers_phase),
            ("checkpoint", cmp.checkpoint_phase),
        ):
            if args.phases and phase not in ("launch", "fill") and phase not in args.phases:
                continue
            t0 = time.monotonic()
            _say(f"# phase {phase}")
            fn()
            phases[phase] = time.monotonic() - t0
        ok = True
    finally:
        cmp.stop_all()
        if ok and not args.keep_logs:
            shutil.rmtree(root, ignore_errors=True)
        else:
            shutil.rmtree(ckpt_root, ignore_errors=True)
            _say(f"# worker logs kept in {log_dir}")
    results = {k: cmp.results[k] for k in ORDER if k in cmp.results}
    frame_pool = wl.frame_pool(64, cfg["seed"])
    data = {
        "benchmark": "compare",
        "machine": info,
        "systems": {s: {"label": SYSTEM_LABELS[s], **cmp.startup[s]} for s in SYSTEMS},
        "ratio_convention": RATIO_CONVENTION,
        "config": {
            **cfg,
            "transport": "gRPC over loopback (localhost); every server and client in its own "
            "process (worker subprocesses of each system's interpreter)",
            "alternation": "each repetition runs both systems back to back, reverb_py first "
            "on even repetitions, dm-reverb first on odd ones",
            "tables": "Fifo remover; MinSize(1) unless stated; Uniform or Prioritized(0.8)",
            "small_step_bytes": wl.step_bytes(wl.small_step()),
            "frame_step_bytes": wl.step_bytes(wl.frame_steps(frame_pool[:1])[0]),
            "frame_snappy_ratio": wl.snappy_ratio(frame_pool),
            "writer": f"client.trajectory_writer(num_keep_alive_refs={wl.SEQ_LEN}), "
            f"flush(block_until_num_items={wl.FLUSH_EVERY}) after each item",
            "learner_batch": LEARNER_BATCH,
            "memory": "VmRSS growth of a server process holding one table (the checkpoint "
            "servers, before any save) while a client fills it; main-server "
            "growth per table also recorded",
            "restore": "from Popen of a new server process (interpreter start, import, "
            "Server(tables, checkpointer=DefaultCheckpointer(dir))) until "
            "server_info() from the client process reports the full table",
        },
        "results": results,
        "memory": cmp.memory,
        "fills": cmp.fills,
        "phases_seconds": phases,
        "warnings": cmp.warnings,
        "loadavg_at_end": list(os.getloadavg()),
        "total_seconds": time.monotonic() - started,
    }
    path = write_json(out, data)
    print(flush=True)
    print(f"{'workload':<27} {'reverb_py':>12} {'dm-reverb':>12} {'unit':<10} {'ratio':>6}  target")
    for name, r in results.items():

        def f(v: float, unit: str = r["unit"]) -> str:
            if unit in ("ms", "CPU s/10k"):
                return f"{v:.3f}"
            return f"{v:.2f}" if unit == "s" else (f"{v:,.0f}" if unit == "B/item" else fmt_rate(v))

        print(
            f"{name:<27} {f(r['reverb_py']['value']):>12} {f(r['dm_reverb']['value']):>12} "
            f"{r['unit']:<10} {r['ratio']:6.2f}  {_verdict(r)}"
        )
    for w in cmp.warnings:
        print(f"WARNING: {w}")
    print(f"# {RATIO_CONVENTION}")
    print(f"# wrote {path} in {data['total_seconds']:.0f} s")
    return 0


def _block_until(text: str) -> int:
    """``--writers-flush``'s value: an int >= 0 (``flush(0)`` waits for every item)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--quick", action="store_true", help="small tables, short runs")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="repetitions per system and workload (default 5; --quick 3)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds per repetition of the single-client workloads",
    )
    parser.add_argument("--small-items", type=int, default=None, help="default 100,000")
    parser.add_argument(
        "--frame-items",
        type=int,
        default=None,
        help="frame items for the memory and checkpoint workloads and the "
        "size of the frame insert table; default 10,000",
    )
    parser.add_argument(
        "--sample-frame-items",
        type=int,
        default=None,
        help="items of the two frame tables sampled; default 100,000",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--phases",
        type=lambda v: set(v.split(",")),
        default=None,
        help="only these phases (comma-separated: single_client, actors, writers, "
        "checkpoint); the tables are filled in any case",
    )
    parser.add_argument(
        "--writers-flush",
        type=_block_until,
        default=wl.FLUSH_EVERY,
        help="block_until_num_items of the many-writers workloads' flushes (>= 0); "
        f"default {wl.FLUSH_EVERY}",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the worker processes' log files"
    )
    parser.add_argument("--worker", choices=("server", "client"), help=argparse.SUPPRESS)
    parser.add_argument("--system", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker-args", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.system, args.fd, args.worker_args)

    quick = args.quick
    small = args.small_items or (3_000 if quick else 100_000)
    frames = args.frame_items or (300 if quick else 10_000)
    sample_frames = args.sample_frame_items or (300 if quick else 100_000)
    cfg = {
        "quick": quick,
        "repeats": args.repeats or (3 if quick else 5),
        "duration": args.duration or (0.3 if quick else 2.5),
        "small_items": small,
        "frame_items": frames,
        "sample_frame_items": sample_frames,
        "sample_per_call": 1_000 if quick else 5_000,
        "frame_sample_per_call": 500 if quick else 2_000,
        "mutate_keys": min(10_000, small // 2) if quick else 10_000,
        "seed": args.seed,
        "actors": {
            "counts": [1, 2, 4],
            "warmup": 0.3 if quick else 1.0,
            "duration": 0.6 if quick else 3.0,
            "samples_per_insert": 4.0,
            "min_size_to_sample": 200 if quick else 1000,
            "error_buffer": 10 * LEARNER_BATCH,
            "max_size": 10**5,
        },
        "writers": {
            "processes": 2,
            "threads": 4,
            "coroutines": 32,
            "flush": args.writers_flush,
            "warmup": 0.3 if quick else 1.0,
            "duration": 0.6 if quick else 3.0,
        },
    }
    dm_python = os.environ.get(DM_PYTHON_ENV, DM_PYTHON_DEFAULT)
    if not os.path.isabs(dm_python):
        dm_python = str(PROJECT_ROOT / dm_python)
    if not os.access(dm_python, os.X_OK):
        raise SystemExit(
            f"no dm-reverb interpreter at {dm_python}: run `make interop` (creates "
            f".venv-reverb) or set {DM_PYTHON_ENV}"
        )
    return _run(args, cfg, dm_python)


if __name__ == "__main__":
    sys.exit(main())
