"""Blocking writers and their server for the many-writer benchmarks
(``server_records``, ``request_sizes``, ``server_split``): ``processes`` processes of
``threads`` threads, each thread its own ``TrajectoryWriter`` on its process' one
``Client``, writing small steps as ``benchmarks.compare``'s ``writers`` workload does (a
length-1 item per step, ``flush(block_until_num_items=...)`` after each), all starting
at once; optionally pinned to given CPUs.

A process is ``python -m benchmarks._writer_procs <port> <table> <threads> <t_go>
<seconds> <block_until>``; it prints one JSON line: the items its writers had confirmed
and its CPU seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

START_DELAY_S = 3.0  # the processes import and connect before they start together
USAGE_KEYS = ("user_seconds", "system_seconds", "voluntary_switches", "involuntary_switches")
CPUS_ENV = "REVERB_PY_BENCH_CPUS"  # a writer process pins itself to these CPUs ("0,1")


def serve(table: str) -> Any:
    """A server on a free port holding the writers' table (Uniform, Fifo remover,
    ``max_size`` 10**6, ``MinSize(1)``); prints its port (the first line
    ``benchmarks._common.start_worker`` reads)."""
    import reverb_py as reverb

    server = reverb.Server(
        [
            reverb.Table(
                table,
                sampler=reverb.selectors.Uniform(),
                remover=reverb.selectors.Fifo(),
                max_size=10**6,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            )
        ],
        port=0,
    )
    print(server.port, flush=True)
    return server


def run_writers(
    port: int, table: str, threads: int, t_go: float, seconds: float, block_until: int
) -> dict[str, Any]:
    """``threads`` writers on one blocking client from ``t_go`` (``time.time()``) for
    ``seconds``: the items they had confirmed and this process' CPU seconds; where the
    ``resource`` module is (Unix), also its user and system CPU seconds and its
    voluntary and involuntary context switches, over the same span."""
    import reverb_py as reverb
    from benchmarks import _workloads as wl

    client = reverb.Client(f"localhost:{port}")
    step = wl.small_step()
    counts = [0] * threads
    failures: list[str] = []
    deadline = time.monotonic() + (t_go - time.time()) + seconds

    def run(i: int) -> None:
        progress: list[tuple[float, int]] = []
        try:
            with client.trajectory_writer(num_keep_alive_refs=wl.SEQ_LEN) as writer:
                wl.writer_loop(writer, table, step, progress, lambda: False, deadline, block_until)
            counts[i] = progress[-1][1]
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            failures.append(repr(error))

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    # The processes start their writers together, at t_go.
    time.sleep(max(0.0, t_go - time.time()))
    usage0 = _usage()
    cpu0 = time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    cpu = time.process_time() - cpu0
    usage1 = _usage()
    if failures:
        raise RuntimeError(f"writer failed: {failures[0]}")
    result: dict[str, Any] = {"items": sum(counts), "cpu_seconds": cpu}
    if usage0 is not None and usage1 is not None:
        result.update({k: usage1[k] - usage0[k] for k in USAGE_KEYS})
    return result


def _usage() -> dict[str, float] | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    values = (usage.ru_utime, usage.ru_stime, usage.ru_nvcsw, usage.ru_nivcsw)
    return dict(zip(USAGE_KEYS, values))


def start(
    port: int,
    table: str,
    processes: int,
    threads: int,
    seconds: float,
    block_until: int,
    cpus: set[int] | None = None,
) -> list[subprocess.Popen[str]]:
    """Starts the writer processes; they begin writing :data:`START_DELAY_S` from now,
    each pinned to ``cpus`` first where given (Linux)."""
    t_go = time.time() + START_DELAY_S
    args = [str(port), table, str(threads), repr(t_go), repr(seconds), str(block_until)]
    env = dict(os.environ)
    env.pop(CPUS_ENV, None)
    if cpus is not None:
        env[CPUS_ENV] = ",".join(str(c) for c in sorted(cpus))
    return [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks._writer_procs", *args],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(processes)
    ]


def finish(procs: list[subprocess.Popen[str]], seconds: float) -> dict[str, float]:
    """Waits for :func:`start`'s processes: their items and CPU seconds (and the
    ``USAGE_KEYS`` where every process gave them), summed."""
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 120)
        if proc.returncode:
            raise RuntimeError(f"a writer process failed ({proc.returncode})")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    summed = {
        "items": sum(o["items"] for o in outs),
        "cpu_seconds": sum(o["cpu_seconds"] for o in outs),
    }
    if all(k in o for o in outs for k in USAGE_KEYS):
        summed.update({k: sum(o[k] for o in outs) for k in USAGE_KEYS})
    return summed


def main(argv: list[str]) -> int:
    port, table, threads, t_go, seconds, block_until = argv
    cpus = os.environ.get(CPUS_ENV)
    if cpus:  # before any thread starts: they inherit it
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    result = run_writers(
        int(port), table, int(threads), float(t_go), float(seconds), int(block_until)
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
