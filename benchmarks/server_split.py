"""Where a reverb_py server's CPU goes while writers insert small items: gRPC (its Python
layer, its C core called from the event loop, its poller thread) against reverb_py's
own code (request parsing, checks, the table), sampled with py-spy.

Run from the project root (``py-spy`` from the ``bench`` extra; sampling another process
needs ptrace rights, e.g. root)::

    python -m benchmarks.server_split [--duration 3] [--out benchmarks/results/server_split.json]

A server process (one Fifo/Uniform table, ``MinSize(1)``) and a client process; the
client runs 1, then 8 threads, each its own ``TrajectoryWriter`` on one ``Client``
writing length-1 small items with ``flush(block_until_num_items=16)`` after each (the
``benchmarks.compare`` writers). Once the writers run, py-spy samples the server for
``--duration`` seconds (250 Hz, ``--nonblocking``, idle threads left out), and the
server's CPU time over the same window comes from ``/proc``.

Each sample is put in one bucket by its innermost Python frame:

* ``own``: a frame of ``reverb_py/`` (with the compiled calls it makes: Cython frames
  are not seen, their time is their caller's);
* ``grpc_calls``: a frame of ``reverb_py/`` on a line that calls gRPC (``context.write``,
  ``context.read``, the request iterator, ...): gRPC's Cython layer below it;
* ``grpc_python``: ``grpc/`` (grpc.aio's Python layer);
* ``event_loop_c``: the event loop's own frame (``LoopThread._run``), i.e. C code it
  calls back: uvloop and gRPC's Cython core (reads, writes, completions);
* ``asyncio``: ``asyncio/``;
* ``grpc_poller``: the thread that polls gRPC's completion queue (``threading``);
* ``other``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import _writer_procs
from benchmarks._common import (
    RESULTS_DIR,
    machine_info,
    proc_cpu_seconds,
    start_worker,
    stop_worker,
    write_json,
)

TABLE = "t"
BUCKETS = ("own", "grpc_calls", "grpc_python", "event_loop_c", "asyncio", "grpc_poller", "other")
ROOT = pathlib.Path(__file__).resolve().parent.parent
# A source line of reverb_py that hands over to gRPC.
GRPC_CALL = re.compile(r"context\.(write|read|abort)\b|request_iterator|\bcall\.(write|read)\b")


@functools.cache
def _calls_grpc(frame: str) -> bool:
    match = re.search(r"\(([^()]*reverb_py/[^():]+):(\d+)\)$", frame)
    if match is None:
        return False
    path = pathlib.Path(match.group(1))
    if not path.is_absolute():
        path = ROOT / path
    try:
        line = path.read_text(encoding="utf-8").splitlines()[int(match.group(2)) - 1]
    except (OSError, IndexError):
        return False
    return GRPC_CALL.search(line) is not None


def bucket(frame: str) -> str:
    """The bucket of a sample whose innermost frame is ``frame`` (py-spy's raw format:
    ``function (path:line)``)."""
    if "_loop_thread.py" in frame and "LoopThread._run" in frame:
        return "event_loop_c"
    if "/reverb_py/" in frame or "(reverb_py/" in frame:
        return "grpc_calls" if _calls_grpc(frame) else "own"
    if "/grpc/" in frame or "(grpc/" in frame:
        return "grpc_python"
    if "/asyncio/" in frame or "(asyncio/" in frame:
        return "asyncio"
    if "threading.py" in frame:
        return "grpc_poller"
    return "other"


def split(raw: str) -> dict[str, Any]:
    """Sample counts per bucket of a py-spy ``--format raw`` file, and the top own frames."""
    counts: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        line = line.strip()
        if not line:
            continue
        stack, _, n = line.rpartition(" ")
        innermost = stack.split(";")[-1]
        b = bucket(innermost)
        counts[b] += int(n)
        if b == "own":
            own[innermost] += int(n)
    total = sum(counts.values())
    return {
        "samples": total,
        "fractions": {b: counts[b] / total if total else 0.0 for b in BUCKETS},
        "top_own_frames": [{"frame": f, "fraction": n / total} for f, n in own.most_common(12)],
    }


# --------------------------------------------------------------------- the two processes


def _server() -> None:
    server = _writer_procs.serve(TABLE)
    sys.stdin.read()  # until the parent closes it
    server.stop()


def _client(port: int, threads: int, seconds: float) -> None:
    from benchmarks import _workloads as wl

    written = _writer_procs.run_writers(port, TABLE, threads, time.time(), seconds, wl.FLUSH_EVERY)
    print(written["items"], flush=True)


def measure(threads: int, duration: float, py_spy: str) -> dict[str, Any]:
    env = dict(os.environ)
    server, port = start_worker("benchmarks.server_split", "server", env)
    try:
        warmup = 1.0
        client = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.server_split",
                "--worker",
                f"client:{port}:{threads}:{warmup + duration + 1.0}",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        time.sleep(warmup)  # the writers start and reach their steady state
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "server.raw"
            cpu0 = proc_cpu_seconds(server.pid)
            t0 = time.monotonic()
            subprocess.run(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(server.pid),
                    "--duration",
                    str(int(duration)),
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--nonblocking",
                    "--output",
                    str(out),
                ],
                check=True,
                capture_output=True,
            )
            seconds = time.monotonic() - t0
            cpu1 = proc_cpu_seconds(server.pid)
            result = split(out.read_text(encoding="utf-8"))
        assert client.stdout is not None
        items = int(client.stdout.read().strip() or 0)
        client.wait(timeout=60)
        total_seconds = warmup + duration + 1.0
        rate = items / total_seconds
        cpu = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / seconds
        result.update(
            writers=threads,
            items_per_s=rate,
            server_cpu_per_wall=cpu,
            server_cpu_s_per_10k_items=None if cpu is None or not rate else cpu / rate * 1e4,
        )
        return result
    finally:
        stop_worker(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0, help="seconds sampled per load")
    parser.add_argument("--out", default=str(RESULTS_DIR / "server_split.json"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "server":
        _server()
        return 0
    if args.worker:
        _, port, threads, seconds = args.worker.split(":")
        _client(int(port), int(threads), float(seconds))
        return 0
    py_spy = shutil.which("py-spy") or str(pathlib.Path(sys.executable).parent / "py-spy")
    if not os.access(py_spy, os.X_OK):
        raise SystemExit("py-spy not found: pip install -e '.[bench]'")
    import reverb_py

    loads = [measure(n, args.duration, py_spy) for n in (1, 8)]
    data = {
        "benchmark": "server_split",
        "machine": machine_info(),
        "implementation": reverb_py.IMPLEMENTATION,
        "config": {
            "writers": "TrajectoryWriter per thread on one Client, length-1 small items, "
            "flush(block_until_num_items=16) after each",
            "sampling": f"py-spy record --rate 250 --nonblocking, {args.duration:g} s per load",
            "buckets": "innermost Python frame of each sample; see the module docstring",
        },
        "loads": loads,
    }
    path = write_json(args.out, data)
    for load in loads:
        f = load["fractions"]
        own = f["own"]
        grpc_share = sum(f[b] for b in BUCKETS if b not in ("own", "other"))
        print(
            f"{load['writers']} writer(s): {load['items_per_s']:,.0f} items/s, server "
            f"{load['server_cpu_per_wall'] or 0:.2f} CPU/wall, "
            f"{load['server_cpu_s_per_10k_items'] or 0:.2f} CPU s per 10k items; "
            f"own {own:.0%}, gRPC + event loop {grpc_share:.0%} "
            f"(calls {f['grpc_calls']:.0%}, Python {f['grpc_python']:.0%}, "
            f"loop C {f['event_loop_c']:.0%}, "
            f"asyncio {f['asyncio']:.0%}, poller {f['grpc_poller']:.0%}), other {f['other']:.0%}"
        )
    print(f"# wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
