"""End-to-end benchmark: a replay server in its own process, a client over loopback gRPC.

Run from the project root::

    python -m benchmarks.e2e [--quick] [--out benchmarks/results/e2e.json]
    python -m benchmarks.e2e --profile insert_small   # cProfile (client) + py-spy (server)

The server is a ``reverb_py.Server`` started in a child process (``multiprocessing``,
spawn) that sends its port and pid back through a pipe; this process is the client
(``reverb_py.Client("localhost:PORT")``). Two server processes are used, one for the
small-step workloads and one for the frames, so that their resident memory
(``VmRSS`` of ``/proc/<pid>/status``) can be read after filling a table.

Workloads (each repetition bounded by ``--duration`` seconds, 3 repetitions, medians):

* ``insert_small``   TrajectoryWriter, one step (obs float32[8], action float32[2],
                     reward float32[]) and one length-1 item per step,
                     ``flush(block_until_num_items=16)`` after each item (items/s, MB/s of
                     raw step bytes);
* ``insert_frames``  the same with obs uint8[84,84,4] frames (compressible patterns);
* ``insert_seq``     length-10 overlapping items, one new small step per item;
* ``sample_uniform`` / ``sample_prioritized``  ``client.sample(num_samples=N,
                     emit_timesteps=False)`` from a table of 100k small items, Uniform /
                     Prioritized(0.8) (samples/s, MB/s of decoded sample data);
* ``sample_frames``  the same from a table of 10k frame items (Uniform);
* ``mutate``         ``client.mutate_priorities`` of 1,000 existing keys per call, on the
                     Prioritized table (keys/s).

Every workload is also timed on the CPU side: CPU seconds of the server process (all its
threads, ``/proc/<pid>/stat``) and of this process (split into the main thread and the
client's event-loop thread) per second of wall time, which shows which side is busy.

``--quick`` (3,000 / 300-item tables, 0.3 s repetitions) writes ``results/e2e_quick.json``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no GOAWAY chatter when a server stops

import numpy as np  # noqa: E402

from benchmarks._common import (  # noqa: E402
    RESULTS_DIR,
    dist_versions,
    fmt_rate,
    machine_info,
    median,
    proc_cpu_seconds,
    proc_status_kib,
    thread_cpu_seconds,
    write_json,
)

FIELDS = ("obs", "action", "reward")
FRAME_SHAPE = (84, 84, 4)
SEQ_LEN = 10
FLUSH_EVERY = 16  # flush(block_until_num_items=16) after each measured item
FILL_FLUSH = 256  # the untimed table fills flush less often

# dm-reverb 0.14 on this kind of machine, NOT measured here (figures given with the task).
REVERB_REFERENCE = {
    "insert_small": {"items_per_s": 13_500},
    "insert_frames": {"items_per_s": 9_500, "mb_per_s": 270},
    "sample_uniform": {"samples_per_s": 4_200},
    "mutate": {"keys_per_s": 1_500_000},
}
REFERENCE_NOTE = (
    "dm-reverb 0.14 figures for this kind of machine, supplied with the task, NOT measured "
    "here; client.sample figure is not per sampler"
)


# ---------------------------------------------------------------------------- server process


def _server_main(conn: Any, specs: list[tuple[str, str, int]]) -> None:
    """Child process: serves ``specs`` ((name, sampler, max_size)) until told to stop."""
    import reverb_py as reverb

    tables = []
    for name, sampler, max_size in specs:
        tables.append(
            reverb.Table(
                name=name,
                sampler=(
                    reverb.selectors.Prioritized(0.8)
                    if sampler == "prioritized"
                    else reverb.selectors.Uniform()
                ),
                remover=reverb.selectors.Fifo(),
                max_size=max_size,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            )
        )
    server = reverb.Server(tables, port=0)
    conn.send((server.port, os.getpid(), reverb.IMPLEMENTATION))
    try:
        conn.recv()  # any message (or EOF when the parent dies) stops the server
    except EOFError:
        pass
    server.stop()
    conn.close()


class ServerProcess:
    """A ``reverb_py.Server`` in a spawned child process; ``with`` stops it."""

    def __init__(self, specs: list[tuple[str, str, int]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_server_main, args=(child, specs), daemon=True)
        self._proc.start()
        child.close()
        if not self._conn.poll(60):
            self._proc.kill()
            raise RuntimeError("the server process did not report its port within 60 s")
        self.port, self.pid, self.implementation = self._conn.recv()

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def rss_kib(self) -> int | None:
        return proc_status_kib(self.pid, "VmRSS")

    def memory(self) -> dict[str, int | None]:
        return {"rss_kib": self.rss_kib(), "hwm_kib": proc_status_kib(self.pid, "VmHWM")}

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.pid)

    def stop(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send("stop")
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(20)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
        self._conn.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


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
    return [
        {"obs": f, "action": np.ones(2, np.float32), "reward": np.float32(0.5)} for f in pool
    ]


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

    def __init__(self, server: ServerProcess) -> None:
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
    server: ServerProcess,
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
    server: ServerProcess,
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
    client: Any, server: ServerProcess, table: str, per_call: int, duration: float
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
    written = {
        tuple(np.asarray(step[k]).tobytes() for k in sorted(FIELDS)) for step in steps
    }
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
    server: ServerProcess,
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


def _repeat(fn: Callable[[], dict[str, Any]], repeats: int) -> list[dict[str, Any]]:
    return [fn() for _ in range(repeats)]


def _log(name: str, res: dict[str, Any]) -> None:
    extra = f"  {res['mb_per_s']:.1f} MB/s" if "mb_per_s" in res else ""
    srv = res.get("server_cpu_per_wall_s")
    print(
        f"  {name:<19} {fmt_rate(res['rate']):>7} {res['unit']:<10}{extra}"
        f"  (cpu/wall: client {res['client_cpu_per_wall_s']:.2f} ["
        + " ".join(f"{k} {v:.2f}" for k, v in res["client_threads_cpu_per_wall_s"].items())
        + f"], server {'n/a' if srv is None else f'{srv:.2f}'})",
        file=sys.stderr,
        flush=True,
    )


# ---------------------------------------------------------------------------- the benchmark


def run_small(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Server 1: small steps. Fills (memory), samples, mutate, then the insert workloads."""
    import reverb_py as reverb

    size = cfg["small_items"]
    specs = [
        ("uniform", "uniform", size),
        ("prioritized", "prioritized", size),
        ("insert", "uniform", 10**6),
        ("seq", "uniform", 10**6),
    ]
    results: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    fills: dict[str, Any] = {}
    rng = np.random.default_rng(cfg["seed"])
    steps = [small_step()]
    with ServerProcess(specs) as server:
        client = reverb.Client(server.address)
        client.server_info(timeout=30)
        time.sleep(0.2)
        memory["server_implementation"] = server.implementation
        memory["baseline"] = server.memory()
        fills["uniform"] = fill(client, server, "uniform", steps, size)
        memory["after_small_uniform"] = server.memory()
        prios = rng.uniform(0.1, 2.0, 4096)
        fills["prioritized"] = fill(client, server, "prioritized", steps, size, prios)
        memory["after_small_uniform_and_prioritized"] = server.memory()
        check_samples(client, "uniform", steps)
        check_samples(client, "prioritized", steps)
        info = client.server_info()
        memory["table_sizes"] = {k: v.current_size for k, v in info.items()}
        assert info["uniform"].current_size == size, info["uniform"]
        assert info["prioritized"].current_size == size, info["prioritized"]
        print(
            f"  filled 2 x {size:,} small items ({fmt_rate(fills['uniform']['items_per_s'])}, "
            f"{fmt_rate(fills['prioritized']['items_per_s'])} items/s); server RSS "
            f"{memory['baseline']['rss_kib'] / 1024:.0f} -> "
            f"{memory['after_small_uniform']['rss_kib'] / 1024:.0f} -> "
            f"{memory['after_small_uniform_and_prioritized']['rss_kib'] / 1024:.0f} MiB",
            file=sys.stderr,
            flush=True,
        )

        for name, table in (("sample_uniform", "uniform"), ("sample_prioritized", "prioritized")):
            sample_rep(client, server, table, min(1000, cfg["sample_per_call"]), 0.0)  # warm-up
            runs = _repeat(
                lambda t=table: sample_rep(
                    client, server, t, cfg["sample_per_call"], cfg["duration"]
                ),
                cfg["repeats"],
            )
            results[name] = _summarize(runs, "samples/s", with_bytes=True)
            _log(name, results[name])

        keys = collect_keys(client, "prioritized", cfg["mutate_keys"], 20 * size)
        per_call = 1000
        updates = [
            {k: float(p) for k, p in zip(keys[i : i + per_call], rng.uniform(0.1, 2.0, per_call))}
            for i in range(0, len(keys) - per_call + 1, per_call)
        ]
        assert updates, f"only {len(keys)} distinct keys found"
        mutate_rep(client, server, "prioritized", updates[:2], 0.0)  # warm-up
        runs = _repeat(
            lambda: mutate_rep(client, server, "prioritized", updates, cfg["duration"]),
            cfg["repeats"],
        )
        results["mutate"] = _summarize(runs, "keys/s", with_bytes=False)
        results["mutate"]["distinct_keys_cycled"] = len(updates) * per_call
        _log("mutate", results["mutate"])
        info = client.server_info()
        assert info["prioritized"].current_size == size, info["prioritized"]

        runs = _repeat(
            lambda: writer_rep(client, server, "insert", steps, cfg["duration"]), cfg["repeats"]
        )
        results["insert_small"] = _summarize(runs, "items/s", with_bytes=True)
        _log("insert_small", results["insert_small"])

        runs = _repeat(
            lambda: writer_rep(client, server, "seq", steps, cfg["duration"], length=SEQ_LEN),
            cfg["repeats"],
        )
        results["insert_seq"] = _summarize(runs, "items/s", with_bytes=True)
        _log("insert_seq", results["insert_seq"])
        for sample in client.sample("seq", num_samples=5, emit_timesteps=False):
            shapes = [np.asarray(col).shape for col in sample.data]
            assert all(shape[0] == SEQ_LEN for shape in shapes), shapes
        memory["after_all_small_workloads"] = server.memory()
        memory["table_sizes_at_end"] = {k: v.current_size for k, v in client.server_info().items()}
    return results, memory, fills


def run_frames(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Server 2: frames. Fill (memory), sample, then the insert workload (evicting)."""
    import reverb_py as reverb

    size = cfg["frame_items"]
    results: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    fills: dict[str, Any] = {}
    pool = frame_pool(64, cfg["seed"])
    steps = frame_steps(pool)
    with ServerProcess([("frames", "uniform", size)]) as server:
        client = reverb.Client(server.address)
        client.server_info(timeout=30)
        time.sleep(0.2)
        memory["server_implementation"] = server.implementation
        memory["baseline"] = server.memory()
        fills["frames"] = fill(client, server, "frames", steps, size)
        memory["after_frames"] = server.memory()
        assert client.server_info()["frames"].current_size == size
        check_samples(client, "frames", steps)
        print(
            f"  filled {size:,} frame items ({fmt_rate(fills['frames']['items_per_s'])} items/s); "
            f"server RSS {memory['baseline']['rss_kib'] / 1024:.0f} -> "
            f"{memory['after_frames']['rss_kib'] / 1024:.0f} MiB",
            file=sys.stderr,
            flush=True,
        )
        per_call = max(1, cfg["sample_per_call"] // 4)
        sample_rep(client, server, "frames", min(500, per_call), 0.0)  # warm-up
        runs = _repeat(
            lambda: sample_rep(client, server, "frames", per_call, cfg["duration"]),
            cfg["repeats"],
        )
        results["sample_frames"] = _summarize(runs, "samples/s", with_bytes=True)
        _log("sample_frames", results["sample_frames"])

        runs = _repeat(
            lambda: writer_rep(client, server, "frames", steps, cfg["duration"]), cfg["repeats"]
        )
        results["insert_frames"] = _summarize(runs, "items/s", with_bytes=True)
        _log("insert_frames", results["insert_frames"])
        memory["after_frame_inserts"] = server.memory()
    return results, memory, {**fills, "frame_snappy_ratio": snappy_ratio(pool)}


ORDER = (
    "insert_small",
    "insert_frames",
    "insert_seq",
    "sample_uniform",
    "sample_prioritized",
    "sample_frames",
    "mutate",
)


def _py_spy() -> str | None:
    """The ``py-spy`` executable next to this interpreter or on PATH, if any."""
    import shutil

    candidate = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return candidate if os.access(candidate, os.X_OK) else shutil.which("py-spy")


def _py_spy_summary(path: str, top: int) -> str:
    """Self and inclusive shares per function from py-spy's ``raw`` (collapsed) output."""
    import collections
    import re

    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip()
            if not line or " " not in line:
                continue
            stack, count = line.rsplit(" ", 1)
            n = int(count)
            total += n
            frames = [re.sub(r":\d+\)$", ")", fr) for fr in stack.split(";")]
            own[frames[-1]] += n
            for fr in set(frames):
                incl[fr] += n
    if not total:
        return "  (no samples)"
    lines = [f"  {total} samples of busy threads; self (leaf Python frame; C code such as "
             "grpc/uvloop/protobuf counts for the Python frame that called it):"]
    lines += [f"    {c / total:6.1%}  {fr}" for fr, c in own.most_common(top)]
    lines.append("  inclusive:")
    lines += [f"    {c / total:6.1%}  {fr}" for fr, c in incl.most_common(top)]
    return "\n".join(lines)


def run_profile(cfg: dict[str, Any], workload: str, top: int) -> None:
    """Profiles one repetition of ``workload``: cProfile of the client's main thread and
    of its background event-loop thread (where the gRPC calls run), and, when ``py-spy``
    is installed, a py-spy sampling of the server process."""
    import cProfile
    import pstats
    import subprocess
    import tempfile

    import reverb_py as reverb
    from reverb_py import client as client_module

    async def _call(fn: Callable[[], None]) -> None:
        fn()

    small = [small_step()]
    frames = frame_steps(frame_pool(64, cfg["seed"]))
    specs = [("t", "prioritized" if workload in ("sample_prioritized", "mutate") else "uniform",
              cfg["frame_items"] if workload == "sample_frames" else cfg["small_items"])]
    if workload.startswith("insert"):
        specs = [("t", "uniform", 10**6)]
    main_prof, loop_prof = cProfile.Profile(), cProfile.Profile()
    spy = _py_spy()
    spy_out = None
    with ServerProcess(specs) as server:
        client = reverb.Client(server.address)
        client.server_info(timeout=30)
        loop_thread = client_module._loop_thread()  # noqa: SLF001 - the client's loop thread
        if workload.startswith("sample") or workload == "mutate":
            fill(client, server, "t", frames if workload == "sample_frames" else small,
                 specs[0][2], np.random.default_rng(0).uniform(0.1, 2.0, 4096))
        if workload == "mutate":
            keys = collect_keys(client, "t", cfg["mutate_keys"], 20 * specs[0][2])
            updates = [{k: 1.5 for k in keys[i : i + 1000]}
                       for i in range(0, len(keys) - 999, 1000)]
            fn: Callable[[], dict[str, Any]] = lambda: mutate_rep(  # noqa: E731
                client, server, "t", updates, cfg["duration"])
        elif workload.startswith("sample"):
            per = cfg["sample_per_call"] // (4 if workload == "sample_frames" else 1)
            fn = lambda: sample_rep(client, server, "t", per, cfg["duration"])  # noqa: E731
        else:
            steps = frames if workload == "insert_frames" else small
            length = SEQ_LEN if workload == "insert_seq" else 1
            fn = lambda: writer_rep(  # noqa: E731
                client, server, "t", steps, cfg["duration"], length=length)
        spy_proc = None
        if spy:
            spy_out = tempfile.NamedTemporaryFile(
                prefix="reverb_e2e_spy_", suffix=".txt", delete=False).name
            spy_proc = subprocess.Popen(
                [spy, "record", "--pid", str(server.pid), "--duration",
                 str(max(1, int(cfg["duration"]))), "--rate", "250", "--format", "raw",
                 "--output", spy_out, "--nonblocking", "--threads"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)  # let py-spy attach
        loop_thread.run(_call(loop_prof.enable))
        main_prof.enable()
        rep = fn()
        main_prof.disable()
        loop_thread.run(_call(loop_prof.disable))
        if spy_proc is not None:
            spy_proc.wait(60)
    rate = rep["count"] / rep["seconds"]
    print(f"\n===== {workload}: {fmt_rate(rate)}/s over {rep['seconds']:.2f}s under cProfile; "
          f"cpu/wall client {rep['client_cpu'] / rep['seconds']:.2f}, server "
          f"{(rep['server_cpu'] or 0) / rep['seconds']:.2f} =====")
    for label, prof in (("client main thread", main_prof),
                        ("client event-loop thread (gRPC calls)", loop_prof)):
        print(f"\n----- cProfile, {label}, by tottime -----")
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)
    print("\n----- cProfile, client main thread, by cumulative -----")
    pstats.Stats(main_prof).sort_stats("cumulative").print_stats(top)
    if spy_out is None:
        print("\n(py-spy not installed: no server profile; `pip install py-spy` to get one)")
    else:
        print(f"\n----- py-spy, server process (pid {server.pid}), {spy_out} -----")
        try:
            print(_py_spy_summary(spy_out, top))
        except OSError as error:
            print(f"  py-spy produced no output ({error})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--quick", action="store_true", help="small tables, short runs")
    parser.add_argument("--duration", type=float, default=None, help="seconds per repetition")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small-items", type=int, default=None, help="default 100,000")
    parser.add_argument("--frame-items", type=int, default=None, help="default 10,000")
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument("--profile", default=None, choices=ORDER,
                        help="profile one workload: cProfile of the client's two threads, "
                             "py-spy of the server when installed")
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args(argv)

    quick = args.quick
    cfg = {
        "duration": args.duration or (0.3 if quick else 3.0),
        "repeats": args.repeats,
        "small_items": args.small_items or (3_000 if quick else 100_000),
        "frame_items": args.frame_items or (300 if quick else 10_000),
        "sample_per_call": 2_000 if quick else 20_000,
        "mutate_keys": 2_000 if quick else 50_000,
        "seed": args.seed,
    }
    if args.profile:
        run_profile(cfg, args.profile, args.profile_top)
        return 0

    from reverb_py import _impl

    out = args.out or str(RESULTS_DIR / ("e2e_quick.json" if quick else "e2e.json"))
    info = machine_info()
    info["packages"] = dist_versions(("grpcio", "protobuf", "cramjam", "uvloop"))
    started = time.perf_counter()
    print(f"# e2e benchmark, client IMPLEMENTATION={_impl.IMPLEMENTATION}", file=sys.stderr)
    small_res, small_mem, small_fill = run_small(cfg)
    frame_res, frame_mem, frame_fill = run_frames(cfg)
    results = {**small_res, **frame_res}
    results = {k: results[k] for k in ORDER}
    warnings = []
    for mem in (small_mem, frame_mem):
        if mem["server_implementation"] != "cython":
            warnings.append(
                f"the server process ran IMPLEMENTATION={mem['server_implementation']!r}"
            )
    small_b = step_bytes(small_step())
    frame_b = step_bytes(frame_steps(frame_pool(1, 0))[0])
    data = {
        "benchmark": "e2e",
        "machine": info,
        "implementation": _impl.IMPLEMENTATION,
        "server_implementation": small_mem["server_implementation"],
        "config": {
            **cfg,
            "transport": "gRPC over loopback (localhost), server in a spawned child process",
            "tables": "Fifo remover, MinSize(1); samplers Uniform / Prioritized(0.8)",
            "writer": f"client.trajectory_writer(num_keep_alive_refs={SEQ_LEN}), "
                      "validate_items=True",
            "flush": f"flush(block_until_num_items={FLUSH_EVERY}) after every measured item; "
                     "final flush() inside the timing",
            "fill_flush": f"fills: flush(block_until_num_items={FILL_FLUSH}) every "
                          f"{FILL_FLUSH} items",
            "small_step_bytes": small_b,
            "frame_step_bytes": frame_b,
            "seq_length": SEQ_LEN,
            "mb": "10^6 bytes; inserts: raw bytes of the appended steps (one new step per "
                  "item); samples: bytes of the decoded sample.data arrays",
            "sample_frames_per_call": max(1, cfg["sample_per_call"] // 4),
            "mutate_keys_per_call": 1000,
            "quick": quick,
        },
        "results": results,
        "memory": {"small": small_mem, "frames": frame_mem},
        "fills": {**small_fill, **frame_fill},
        "reverb_reference": {"note": REFERENCE_NOTE, "values": REVERB_REFERENCE},
        "warnings": warnings,
        "total_seconds": time.perf_counter() - started,
    }
    path = write_json(out, data)
    print(flush=True)
    print(f"{'workload':<20} {'rate':>9} {'unit':<10} {'MB/s':>8}")
    for name, res in results.items():
        mb = f"{res['mb_per_s']:.1f}" if "mb_per_s" in res else ""
        print(f"{name:<20} {fmt_rate(res['rate']):>9} {res['unit']:<10} {mb:>8}")
    for w in warnings:
        print(f"WARNING: {w}")
    print(f"# wrote {path} in {data['total_seconds']:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
