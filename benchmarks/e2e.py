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
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no GOAWAY chatter when a server stops

import numpy as np  # noqa: E402

from benchmarks._common import (  # noqa: E402
    RESULTS_DIR,
    dist_versions,
    fmt_rate,
    machine_info,
    proc_cpu_seconds,
    proc_status_kib,
    write_json,
)
from benchmarks._workloads import (  # noqa: E402,F401 - re-exported for benchmarks.checkpoint
    FIELDS,
    FILL_FLUSH,
    FLUSH_EVERY,
    FRAME_SHAPE,
    SEQ_LEN,
    Meter,
    _repeat,
    _summarize,
    check_samples,
    collect_keys,
    fill,
    frame_pool,
    frame_steps,
    mutate_rep,
    sample_rep,
    small_step,
    snappy_ratio,
    step_bytes,
    writer_rep,
)

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
    lines = [
        f"  {total} samples of busy threads; self (leaf Python frame; C code such as "
        "grpc/uvloop/protobuf counts for the Python frame that called it):"
    ]
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
    from reverb_py._client.channel import shared_loop_thread

    async def _call(fn: Callable[[], None]) -> None:
        fn()

    small = [small_step()]
    frames = frame_steps(frame_pool(64, cfg["seed"]))
    specs = [
        (
            "t",
            "prioritized" if workload in ("sample_prioritized", "mutate") else "uniform",
            cfg["frame_items"] if workload == "sample_frames" else cfg["small_items"],
        )
    ]
    if workload.startswith("insert"):
        specs = [("t", "uniform", 10**6)]
    main_prof, loop_prof = cProfile.Profile(), cProfile.Profile()
    spy = _py_spy()
    spy_out = None
    with ServerProcess(specs) as server:
        client = reverb.Client(server.address)
        client.server_info(timeout=30)
        loop_thread = shared_loop_thread()  # the blocking clients' loop thread
        if workload.startswith("sample") or workload == "mutate":
            fill(
                client,
                server,
                "t",
                frames if workload == "sample_frames" else small,
                specs[0][2],
                np.random.default_rng(0).uniform(0.1, 2.0, 4096),
            )
        if workload == "mutate":
            keys = collect_keys(client, "t", cfg["mutate_keys"], 20 * specs[0][2])
            updates = [
                dict.fromkeys(keys[i : i + 1000], 1.5) for i in range(0, len(keys) - 999, 1000)
            ]
            fn: Callable[[], dict[str, Any]] = lambda: mutate_rep(  # noqa: E731
                client, server, "t", updates, cfg["duration"]
            )
        elif workload.startswith("sample"):
            per = cfg["sample_per_call"] // (4 if workload == "sample_frames" else 1)
            fn = lambda: sample_rep(client, server, "t", per, cfg["duration"])  # noqa: E731
        else:
            steps = frames if workload == "insert_frames" else small
            length = SEQ_LEN if workload == "insert_seq" else 1
            fn = lambda: writer_rep(  # noqa: E731
                client, server, "t", steps, cfg["duration"], length=length
            )
        spy_proc = None
        if spy:
            spy_out = tempfile.NamedTemporaryFile(
                prefix="reverb_e2e_spy_", suffix=".txt", delete=False
            ).name
            spy_proc = subprocess.Popen(
                [
                    spy,
                    "record",
                    "--pid",
                    str(server.pid),
                    "--duration",
                    str(max(1, int(cfg["duration"]))),
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
            time.sleep(0.3)  # let py-spy attach
        loop_thread.run(_call(loop_prof.enable))
        main_prof.enable()
        rep = fn()
        main_prof.disable()
        loop_thread.run(_call(loop_prof.disable))
        if spy_proc is not None:
            spy_proc.wait(60)
    rate = rep["count"] / rep["seconds"]
    print(
        f"\n===== {workload}: {fmt_rate(rate)}/s over {rep['seconds']:.2f}s under cProfile; "
        f"cpu/wall client {rep['client_cpu'] / rep['seconds']:.2f}, server "
        f"{(rep['server_cpu'] or 0) / rep['seconds']:.2f} ====="
    )
    for label, prof in (
        ("client main thread", main_prof),
        ("client event-loop thread (gRPC calls)", loop_prof),
    ):
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
    parser.add_argument(
        "--profile",
        default=None,
        choices=ORDER,
        help="profile one workload: cProfile of the client's two threads, "
        "py-spy of the server when installed",
    )
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
