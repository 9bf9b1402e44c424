"""Checkpoint benchmark: save and restore of a server in its own process, through the API.

Run from the project root::

    python -m benchmarks.checkpoint [--quick] [--out benchmarks/results/checkpoint.json]
    python -m benchmarks.checkpoint --profile small   # py-spy of a save, cProfile of a load

The server is a ``reverb_py.Server(tables, port=0,
checkpointer=reverb_py.checkpointers.DefaultCheckpointer(dir))`` in a child process
(``multiprocessing``, spawn, as ``benchmarks.e2e.ServerProcess``); this process is the
client over loopback gRPC. For each workload:

* **fill** a fresh server's table (``benchmarks._workloads.fill``: TrajectoryWriter, one
  length-1 item per step, untimed);
* **save** 3 times: ``client.checkpoint()`` (wall time in this process; with the
  default ``keep=1`` each save also deletes the previous checkpoint). A thread polls the
  server's ``VmRSS`` / ``VmHWM`` (``/proc/<pid>/status``) every 10 ms during the call;
  ``VmHWM`` is reset (``/proc/<pid>/clear_refs``, 5) just before, when allowed, so its
  value afterwards is the peak of the save. Size of the checkpoint directory on disk;
* **restore** 3 times: a new server process with the same checkpointer directory; the
  time from ``Process.start()`` until ``client.server_info()`` answers with the full
  table, split into the child's phases (interpreter + imports, ``Server()`` whose
  ``load_latest`` call is timed, gRPC start, first answer). Then, in that child, the
  in-process part alone: ``DefaultCheckpointer(dir).load_latest(parse_chunk)`` and
  ``Table.restore`` into fresh tables, timed separately.

Workloads: ``small``, 100,000 items of one small step (obs float32[8], action
float32[2], reward float32[]); ``frames``, 10,000 items of uint8[84,84,4] frames made as
``benchmarks.e2e`` makes them (compressible; 1,000 distinct frames cycled);
``frames_random``, 10,000 items of uniformly random (incompressible) frames.

``--quick`` (3,000 / 300 items) writes ``results/checkpoint_quick.json``.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no GOAWAY chatter when a server stops

import numpy as np  # noqa: E402

from benchmarks._common import (  # noqa: E402
    RESULTS_DIR,
    dist_versions,
    fs_type,
    machine_info,
    median,
    proc_cpu_seconds,
    proc_status_kib,
    reset_peak_rss,
    write_json,
)
from benchmarks._workloads import (  # noqa: E402
    check_samples,
    fill,
    frame_pool,
    frame_steps,
    small_step,
    snappy_ratio,
    step_bytes,
)
from benchmarks.e2e import ServerProcess, _py_spy, _py_spy_summary  # noqa: E402

TABLE = "replay"
DISTINCT_FRAMES = 1000
POLL_S = 0.01

# dm-reverb 0.14 on this kind of machine, NOT measured here (figures given with the task).
REVERB_REFERENCE = {
    "small": {"save_s": 1.6, "restore_s": 0.7},
    "frames": {"save_s": 5.5, "restore_s": 1.0},
    "frames_random": {"save_s": 5.5, "restore_s": 1.0},
}
REFERENCE_NOTE = (
    "dm-reverb 0.14 figures for this kind of machine, supplied with the task, NOT measured "
    "here: 100k small items 1.6 s save / 0.7 s restore, 10k 84x84x4 uint8 items 5.5 s / "
    "1.0 s (frame content not stated, so shown for both frame workloads)"
)

WORKLOAD_LABELS = {
    "small": "small steps (44 B), length-1 items",
    "frames": "uint8[84,84,4] frames, compressible (as e2e)",
    "frames_random": "uint8[84,84,4] frames, random (incompressible)",
}


# ---------------------------------------------------------------------------- server process


def _make_tables(reverb: Any, max_size: int) -> list[Any]:
    return [
        reverb.Table(
            name=TABLE,
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=max_size,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
    ]


def _in_process_restore(reverb: Any, directory: str, max_size: int) -> dict[str, Any]:
    """``DefaultCheckpointer(directory).load_latest(parse_chunk)`` then ``Table.restore``
    into fresh tables, each timed (in the server's child process, beside its tables)."""
    from reverb_py.server._chunks import parse_chunk

    gc.collect()
    t0 = time.perf_counter()
    loaded = reverb.checkpointers.DefaultCheckpointer(directory).load_latest(parse_chunk)
    t1 = time.perf_counter()
    assert loaded is not None, f"no checkpoint in {directory}"
    _, snapshots = loaded
    tables = {t.name: t for t in _make_tables(reverb, max_size)}
    t2 = time.perf_counter()
    for snapshot in snapshots:
        tables[snapshot.checkpoint.table_name].restore(snapshot)
    t3 = time.perf_counter()
    items = sum(len(s.items) for s in snapshots)
    del loaded, snapshots, tables
    gc.collect()
    return {
        "load_latest_s": t1 - t0,
        "table_restore_s": t3 - t2,
        "total_s": (t1 - t0) + (t3 - t2),
        "items": items,
    }


def _profile_text(fn: Any, top: int) -> str:
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def _ckpt_server_main(conn: Any, directory: str, max_size: int) -> None:
    """Child process: a server with a ``DefaultCheckpointer(directory)``; answers requests
    on ``conn`` until ``"stop"`` (or EOF)."""
    entered = time.time()
    t0 = time.perf_counter()
    import reverb_py as reverb

    t_import = time.perf_counter()
    checkpointer = reverb.checkpointers.DefaultCheckpointer(directory)
    load_s: list[float] = []
    load_latest = checkpointer.load_latest

    def timed_load_latest(*args: Any, **kwargs: Any) -> Any:  # instrumentation only
        start = time.perf_counter()
        try:
            return load_latest(*args, **kwargs)
        finally:
            load_s.append(time.perf_counter() - start)

    checkpointer.load_latest = timed_load_latest  # type: ignore[method-assign]
    tables = _make_tables(reverb, max_size)
    t_tables = time.perf_counter()
    server = reverb.Server(tables, port=0, checkpointer=checkpointer)
    t_server = time.perf_counter()
    load = load_s[0] if load_s else 0.0
    timings = {
        "entered_main_unix": entered,
        "import_reverb_s": t_import - t0,
        "server_ctor_s": t_server - t_tables,
        "ctor_load_latest_s": load,
        "ctor_rest_s": (t_server - t_tables) - load,  # Table.restore + gRPC server start
    }
    conn.send((server.port, os.getpid(), reverb.IMPLEMENTATION, timings))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg == "stop":
            break
        kind = msg[0]
        try:
            if kind == "restore_in_process":
                conn.send(_in_process_restore(reverb, directory, max_size))
            elif kind == "profile_restore":
                conn.send(
                    _profile_text(lambda: _in_process_restore(reverb, directory, max_size), msg[1])
                )
            elif kind == "profile_save":
                # The save RPC's work, in this thread: snapshot, then checkpointer.save.
                def save() -> None:
                    snapshots = [t.snapshot() for t in tables]
                    checkpointer.save(snapshots)

                conn.send(_profile_text(save, msg[1]))
            else:
                conn.send(RuntimeError(f"unknown request {msg!r}"))
        except Exception as error:  # noqa: BLE001 - reported to the parent
            conn.send(error)
    server.stop()
    conn.close()


class CheckpointServerProcess(ServerProcess):
    """``benchmarks.e2e.ServerProcess`` with a ``DefaultCheckpointer(directory)``; also
    records the time from ``Process.start()`` to the port report."""

    def __init__(self, directory: str, max_size: int) -> None:  # noqa: D107
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_ckpt_server_main, args=(child, directory, max_size), daemon=True
        )
        self.started_unix = time.time()
        self.started = time.perf_counter()
        self._proc.start()
        child.close()
        if not self._conn.poll(300):
            self._proc.kill()
            raise RuntimeError("the server process did not report its port within 300 s")
        self.port, self.pid, self.implementation, self.timings = self._conn.recv()
        self.reported = time.perf_counter()

    def request(self, *msg: Any, timeout: float = 300) -> Any:
        self._conn.send(msg)
        if not self._conn.poll(timeout):
            raise RuntimeError(f"no answer to {msg[0]!r} within {timeout} s")
        answer = self._conn.recv()
        if isinstance(answer, Exception):
            raise answer
        return answer


class MemoryPoller:
    """Polls ``VmRSS`` and ``VmHWM`` of a process every ``POLL_S`` seconds in a thread."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._stop = threading.Event()
        self.samples = 0
        self.peak_rss_kib = 0
        self.peak_hwm_kib = 0
        self._thread = threading.Thread(target=self._run, name="mem-poller", daemon=True)

    def _run(self) -> None:
        while True:
            rss = proc_status_kib(self._pid, "VmRSS")
            hwm = proc_status_kib(self._pid, "VmHWM")
            if rss is not None:
                self.samples += 1
                self.peak_rss_kib = max(self.peak_rss_kib, rss)
            if hwm is not None:
                self.peak_hwm_kib = max(self.peak_hwm_kib, hwm)
            if self._stop.wait(POLL_S):
                return

    def __enter__(self) -> MemoryPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def dir_size(path: str) -> dict[str, Any]:
    """Apparent and allocated bytes of the files in ``path`` (one checkpoint)."""
    files: dict[str, int] = {}
    allocated = 0
    for name in sorted(os.listdir(path)):
        st = os.stat(os.path.join(path, name))
        files[name] = st.st_size
        allocated += st.st_blocks * 512
    return {"bytes": sum(files.values()), "allocated_bytes": allocated, "files": files}


# ---------------------------------------------------------------------------- measurement


def save_rep(client: Any, server: CheckpointServerProcess) -> dict[str, Any]:
    """One ``client.checkpoint()``: wall time, server CPU, memory, size on disk."""
    gc.collect()
    time.sleep(0.05)
    rss_before = proc_status_kib(server.pid, "VmRSS")
    hwm_reset = reset_peak_rss(server.pid)
    hwm_before = proc_status_kib(server.pid, "VmHWM")
    cpu0 = proc_cpu_seconds(server.pid)
    with MemoryPoller(server.pid) as poller:
        t0 = time.perf_counter()
        path = client.checkpoint()
        seconds = time.perf_counter() - t0
    cpu1 = proc_cpu_seconds(server.pid)
    rss_after = proc_status_kib(server.pid, "VmRSS")
    hwm_after = proc_status_kib(server.pid, "VmHWM")
    return {
        "seconds": seconds,
        "path": path,
        "server_cpu": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
        "rss_before_kib": rss_before,
        "rss_peak_polled_kib": max(poller.peak_rss_kib, rss_after or 0),
        "rss_after_kib": rss_after,
        "hwm_reset": hwm_reset,
        "hwm_before_kib": hwm_before,
        "hwm_after_kib": hwm_after,
        # VmHWM after a reset is the true peak; else (reset refused) the polled maximum.
        "rss_peak_kib": hwm_after
        if hwm_reset and hwm_after is not None
        else max(poller.peak_rss_kib, rss_after or 0),
        "poll_samples": poller.samples,
        "size": dir_size(path),
    }


def restore_rep(directory: str, max_size: int, n: int) -> dict[str, Any]:
    """A new server process on ``directory``: time until ``server_info()`` reports ``n``
    items, its phases, then the in-process load + ``Table.restore`` in that child."""
    import reverb_py as reverb

    gc.collect()
    with CheckpointServerProcess(directory, max_size) as server:
        client = reverb.Client(server.address)
        info = client.server_info(timeout=60)
        ready = time.perf_counter()
        size = info[TABLE].current_size
        assert size == n, f"restored table has {size} items, expected {n}"
        t = server.timings
        phases = {
            "spawn_and_imports_s": t["entered_main_unix"] - server.started_unix,
            "import_reverb_s": t["import_reverb_s"],
            "server_ctor_s": t["server_ctor_s"],
            "ctor_load_latest_s": t["ctor_load_latest_s"],
            "ctor_rest_s": t["ctor_rest_s"],
            "first_server_info_s": ready - server.reported,
        }
        rss = proc_status_kib(server.pid, "VmRSS")
        hwm = proc_status_kib(server.pid, "VmHWM")
        in_process = server.request("restore_in_process")
        assert in_process["items"] == n, in_process
        rep = {
            "seconds": ready - server.started,
            "phases": phases,
            "rss_after_restore_kib": rss,
            "hwm_after_restore_kib": hwm,
            "in_process": in_process,
            "implementation": server.implementation,
        }
    return rep


def _med(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for r in runs:
        v: Any = r
        for p in path:
            v = v[p]
        values.append(v)
    return median(values)


def run_workload(
    name: str, steps: list[dict[str, Any]], n: int, repeats: int, root: str
) -> dict[str, Any]:
    import reverb_py as reverb

    directory = os.path.join(root, name)
    out: dict[str, Any] = {
        "items": n,
        "step_bytes": step_bytes(steps[0]),
        "distinct_steps": len(steps),
    }
    with CheckpointServerProcess(directory, n) as server:
        client = reverb.Client(server.address)
        client.server_info(timeout=60)
        out["server_implementation"] = server.implementation
        out["start_empty_s"] = server.reported - server.started
        out["rss_empty_kib"] = proc_status_kib(server.pid, "VmRSS")
        out["fill"] = fill(client, server, TABLE, steps, n)
        assert client.server_info()[TABLE].current_size == n
        out["rss_filled_kib"] = proc_status_kib(server.pid, "VmRSS")
        _say(
            f"  {name}: filled {n:,} items ({out['fill']['items_per_s']:,.0f} items/s), "
            f"server RSS {out['rss_empty_kib'] / 1024:.0f} -> "
            f"{out['rss_filled_kib'] / 1024:.0f} MiB"
        )
        saves = []
        for i in range(repeats):
            rep = save_rep(client, server)
            saves.append(rep)
            _say(
                f"    save {i + 1}: {rep['seconds']:.3f} s, {rep['size']['bytes'] / 1e6:.1f} MB, "
                f"server cpu {rep['server_cpu'] or 0:.2f} s, RSS "
                f"{rep['rss_before_kib'] / 1024:.0f} -> peak "
                f"{rep['rss_peak_polled_kib'] / 1024:.0f} (HWM {rep['hwm_after_kib'] / 1024:.0f})"
                f" -> {rep['rss_after_kib'] / 1024:.0f} MiB"
            )
        last_path = saves[-1]["path"]
        complete = [e for e in os.listdir(directory) if not e.startswith(".")]
        assert complete == [os.path.basename(last_path)], complete  # keep=1
    restores = []
    for i in range(repeats):
        rep = restore_rep(directory, n, n)
        restores.append(rep)
        ph, ip = rep["phases"], rep["in_process"]
        _say(
            f"    restore {i + 1}: {rep['seconds']:.3f} s to a full server_info (spawn+imports "
            f"{ph['spawn_and_imports_s']:.2f}, import reverb_py {ph['import_reverb_s']:.2f}, "
            f"Server() {ph['server_ctor_s']:.2f} of which load_latest "
            f"{ph['ctor_load_latest_s']:.2f}, first answer {ph['first_server_info_s']:.2f}); "
            f"in process: load_latest {ip['load_latest_s']:.3f} s + Table.restore "
            f"{ip['table_restore_s']:.3f} s; RSS {rep['rss_after_restore_kib'] / 1024:.0f} MiB"
        )
    # Untimed: the restored data is what was written.
    with CheckpointServerProcess(directory, n) as server:
        client = reverb.Client(server.address)
        client.server_info(timeout=60)
        check_samples(client, TABLE, steps)
    size = saves[-1]["size"]
    raw = n * out["step_bytes"]
    save_s = _med(saves, "seconds")
    out["save"] = {
        "seconds": save_s,
        "seconds_runs": [r["seconds"] for r in saves],
        "items_per_s": n / save_s,
        "mb_per_s_on_disk": size["bytes"] / save_s / 1e6,
        "server_cpu_s": median([r["server_cpu"] for r in saves if r["server_cpu"] is not None])
        if any(r["server_cpu"] is not None for r in saves)
        else None,
        "runs": saves,
    }
    out["memory_during_save"] = {
        "rss_before_kib": _med(saves, "rss_before_kib"),
        "rss_peak_kib": _med(saves, "rss_peak_kib"),
        "rss_peak_polled_kib": _med(saves, "rss_peak_polled_kib"),
        "hwm_after_kib": _med(saves, "hwm_after_kib"),
        "hwm_reset": all(r["hwm_reset"] for r in saves),
        "rss_after_kib": _med(saves, "rss_after_kib"),
        "extra_peak_kib": median([r["rss_peak_kib"] - r["rss_before_kib"] for r in saves]),
    }
    out["checkpoint_size"] = {**size, "raw_step_bytes": raw, "bytes_per_item": size["bytes"] / n}
    out["restore"] = {
        "seconds": _med(restores, "seconds"),
        "seconds_runs": [r["seconds"] for r in restores],
        "phases": {k: _med(restores, "phases", k) for k in restores[0]["phases"]},
        "rss_after_restore_kib": _med(restores, "rss_after_restore_kib"),
        "hwm_after_restore_kib": _med(restores, "hwm_after_restore_kib"),
        "runs": restores,
    }
    out["restore_in_process"] = {
        k: _med(restores, "in_process", k) for k in ("load_latest_s", "table_restore_s", "total_s")
    }
    out["restore_in_process"]["total_s_runs"] = [r["in_process"]["total_s"] for r in restores]
    return out


def baseline_start(repeats: int, root: str) -> dict[str, Any]:
    """Start of a server process with an empty checkpoint directory (nothing to load)."""
    import reverb_py as reverb

    runs = []
    for i in range(repeats):
        with CheckpointServerProcess(os.path.join(root, f"empty{i}"), 1000) as server:
            client = reverb.Client(server.address)
            client.server_info(timeout=60)
            runs.append(time.perf_counter() - server.started)
    return {"seconds": median(runs), "seconds_runs": runs}


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def random_frame_steps(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "obs": rng.integers(0, 256, (84, 84, 4), dtype=np.uint8),
            "action": np.ones(2, np.float32),
            "reward": np.float32(0.5),
        }
        for _ in range(n)
    ]


def workload_steps(name: str, seed: int) -> list[dict[str, Any]]:
    if name == "small":
        return [small_step()]
    if name == "frames":
        return frame_steps(frame_pool(DISTINCT_FRAMES, seed))
    return random_frame_steps(DISTINCT_FRAMES, seed + 1)


# ---------------------------------------------------------------------------- profile


def run_profile(cfg: dict[str, Any], workload: str, top: int, root: str) -> None:
    """Fills one workload's table, then: py-spy of the server during ``client.checkpoint()``,
    cProfile (in the child) of the save's work and of ``load_latest`` + ``Table.restore``."""
    import signal
    import subprocess

    import reverb_py as reverb

    n = cfg["small_items"] if workload == "small" else cfg["frame_items"]
    steps = workload_steps(workload, cfg["seed"])
    directory = os.path.join(root, workload)
    spy = _py_spy()
    with CheckpointServerProcess(directory, n) as server:
        client = reverb.Client(server.address)
        client.server_info(timeout=60)
        fill(client, server, TABLE, steps, n)
        client.checkpoint()  # warm-up: the next save also deletes one
        if spy:
            spy_out = tempfile.NamedTemporaryFile(
                prefix="reverb_ckpt_spy_save_", suffix=".txt", delete=False
            ).name
            proc = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(server.pid),
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--output",
                    spy_out,
                    "--nonblocking",
                    "--threads",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)
            t0 = time.perf_counter()
            client.checkpoint()
            seconds = time.perf_counter() - t0
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            print(
                f"\n===== {workload}: client.checkpoint() {seconds:.2f} s under py-spy; "
                f"py-spy of the server process ({spy_out}) ====="
            )
            try:
                print(_py_spy_summary(spy_out, top))
            except OSError as error:
                print(f"  py-spy produced no output ({error})")
        else:
            print("(py-spy not installed: no sampling of the save RPC)")
        print(
            f"\n===== {workload}: cProfile of the save's work in the server process "
            "(snapshot + DefaultCheckpointer.save, main thread) ====="
        )
        print(server.request("profile_save", top))
    with CheckpointServerProcess(directory, n) as server:
        if spy:
            spy_out = tempfile.NamedTemporaryFile(
                prefix="reverb_ckpt_spy_restore_", suffix=".txt", delete=False
            ).name
            proc = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(server.pid),
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--output",
                    spy_out,
                    "--nonblocking",
                    "--threads",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.5)
            res = server.request("restore_in_process")
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            print(
                f"\n===== {workload}: load_latest {res['load_latest_s']:.2f} s + "
                f"Table.restore {res['table_restore_s']:.2f} s in a server process under "
                f"py-spy ({spy_out}) ====="
            )
            try:
                print(_py_spy_summary(spy_out, top))
            except OSError as error:
                print(f"  py-spy produced no output ({error})")
        print(
            f"\n===== {workload}: cProfile of load_latest(parse_chunk) + Table.restore in "
            "a server process ====="
        )
        print(server.request("profile_restore", top))


# ---------------------------------------------------------------------------- main


ORDER = ("small", "frames", "frames_random")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--quick", action="store_true", help="small tables")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small-items", type=int, default=None, help="default 100,000")
    parser.add_argument("--frame-items", type=int, default=None, help="default 10,000")
    parser.add_argument("--workloads", default=",".join(ORDER))
    parser.add_argument(
        "--dir",
        default=None,
        help="where the checkpoints go (default: a new temporary directory, deleted at the end)",
    )
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument(
        "--profile",
        default=None,
        choices=ORDER,
        help="profile one workload's save and restore instead",
    )
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args(argv)

    quick = args.quick
    cfg = {
        "repeats": args.repeats,
        "small_items": args.small_items or (3_000 if quick else 100_000),
        "frame_items": args.frame_items or (300 if quick else 10_000),
        "seed": args.seed,
    }
    root = tempfile.mkdtemp(prefix="reverb_ckpt_bench_", dir=args.dir)
    try:
        if args.profile:
            run_profile(cfg, args.profile, args.profile_top, root)
            return 0
        return _run(args, cfg, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(args: argparse.Namespace, cfg: dict[str, Any], root: str) -> int:
    from reverb_py import _impl

    quick = args.quick
    out = args.out or str(RESULTS_DIR / ("checkpoint_quick.json" if quick else "checkpoint.json"))
    info = machine_info()
    info["packages"] = dist_versions(("grpcio", "protobuf", "cramjam", "google-crc32c"))
    info["checkpoint_fs"] = fs_type(root)
    started = time.perf_counter()
    _say(
        f"# checkpoint benchmark, client IMPLEMENTATION={_impl.IMPLEMENTATION}, "
        f"checkpoints in {root} ({info['checkpoint_fs']})"
    )
    results: dict[str, Any] = {}
    warnings: list[str] = []
    base = baseline_start(cfg["repeats"], root)
    _say(f"  server start, empty checkpoint directory: {base['seconds']:.2f} s (median)")
    for name in [w for w in args.workloads.split(",") if w]:
        if name not in ORDER:
            raise SystemExit(f"unknown workload {name!r} (one of {', '.join(ORDER)})")
        n = cfg["small_items"] if name == "small" else cfg["frame_items"]
        steps = workload_steps(name, cfg["seed"])
        res = run_workload(name, steps, n, cfg["repeats"], root)
        if name == "frames":
            res["snappy_ratio"] = snappy_ratio([s["obs"] for s in steps])
        elif name == "frames_random":
            res["snappy_ratio"] = snappy_ratio([s["obs"] for s in steps[:64]])
        del steps
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        results[name] = res
        impls = {res["server_implementation"]} | {
            r["implementation"] for r in res["restore"]["runs"]
        }
        if impls != {"cython"}:
            warnings.append(f"{name}: the server processes ran IMPLEMENTATION={sorted(impls)}")
    data = {
        "benchmark": "checkpoint",
        "machine": info,
        "implementation": _impl.IMPLEMENTATION,
        "server_implementation": next(iter(results.values()))["server_implementation"]
        if results
        else None,
        "config": {
            **cfg,
            "transport": "gRPC over loopback (localhost), server in a spawned child process",
            "table": "one table, Uniform sampler, Fifo remover, MinSize(1), max_size = items",
            "checkpointer": "reverb_py.checkpointers.DefaultCheckpointer(dir) (keep=1: each "
            "save deletes the previous checkpoint, inside the timing)",
            "save": "client.checkpoint() wall time in the client process",
            "restore": "Process.start() of a new server process on the same directory until "
            "client.server_info() reports the full table; in_process: "
            "load_latest(parse_chunk) + Table.restore in that child",
            "memory": f"VmRSS polled every {POLL_S * 1000:.0f} ms during the save; VmHWM "
            "reset (clear_refs 5) just before the save, read after",
            "fill": "benchmarks._workloads.fill: TrajectoryWriter, length-1 items, "
            "flush(block_until_num_items=256) every 256 items",
            "distinct_frames": DISTINCT_FRAMES,
            "page_cache": "warm: restores read the files the saves just wrote",
            "checkpoint_fs": info["checkpoint_fs"],
            "quick": quick,
        },
        "baseline_start_empty": base,
        "results": results,
        "reverb_reference": {"note": REFERENCE_NOTE, "values": REVERB_REFERENCE},
        "warnings": warnings,
        "total_seconds": time.perf_counter() - started,
    }
    path = write_json(out, data)
    print(flush=True)
    print(
        f"{'workload':<15} {'items':>8} {'save s':>7} {'restore s':>9} {'in-proc s':>9} "
        f"{'size MB':>8} {'peak MiB':>9}"
    )
    for name, r in results.items():
        print(
            f"{name:<15} {r['items']:>8,} {r['save']['seconds']:>7.2f} "
            f"{r['restore']['seconds']:>9.2f} {r['restore_in_process']['total_s']:>9.2f} "
            f"{r['checkpoint_size']['bytes'] / 1e6:>8.1f} "
            f"{r['memory_during_save']['rss_peak_kib'] / 1024:>9.0f}"
        )
    for w in warnings:
        print(f"WARNING: {w}")
    print(f"# wrote {path} in {data['total_seconds']:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
