"""Learner input: reverb_py's datasets vs dm-reverb's ``TrajectoryDataset``, one table.

Run from the project root (in the reverb_py environment)::

    python -m benchmarks.learner [--quick] [--profile] [--out benchmarks/results/learner.json]

One reverb_py server process holds two prefilled tables (Uniform sampler, ``MinSize(1)``,
length-1 items with a signature): ``small`` (the 44-byte step of ``benchmarks.compare``)
and ``frames`` (uint8[84,84,4] frames that snappy packs to ~1/10, plus action and
reward). Each *side* is a fresh process of its own interpreter that reads batches of 256
for a fixed time after a warm-up and reports samples/s delivered to its loop:

* ``dm``: dm-reverb 0.14's ``TrajectoryDataset.from_table_signature(...)
  .batch(256).as_numpy_iterator()`` (interpreter: ``REVERB_PY_DM_REVERB_PYTHON``, default
  ``.venv-reverb/bin/python``);
* ``numpy``: ``reverb_py.data.TrajectoryIterator.from_table_signature(...,
  batch_size=256)``;
* ``tf``: ``reverb_py.TrajectoryDataset.from_table_signature(...).batch(256)
  .as_numpy_iterator()``; ``torch``: ``reverb_py.torch.TrajectoryDataset`` (in the loop
  process, no ``DataLoader`` workers); ``jax``: ``reverb_py.jax.TrajectoryIterator``
  (CPU device); ``jax-device_put``: the same iterator with every batch put through the
  public ``jax.device_put`` (one call per batch) instead of its direct transfer — these
  in ``REVERB_PY_FRAMEWORKS_PYTHON`` (default ``.venv-frameworks/bin/python``, made by
  ``make test-frameworks``), skipped if absent;
* ``numpy+torch``, ``numpy+jax``: the ``numpy`` side in that interpreter, with the
  framework imported and its runtime started first (what the framework costs a process
  by being there, apart from its iterator).

Every side uses ``max_in_flight_samples_per_worker=512`` and the default workers. The
repetitions alternate the order of the sides (rep 1 in the listed order, rep 2 reversed,
...); medians are reported, and ratios against ``dm``. ``--profile`` also prints a
cProfile of the ``numpy`` side's consumer thread and its loop thread's share of CPU.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

from benchmarks._common import machine_info, median, write_json
from benchmarks._workloads import frame_pool, small_step

BATCH = 256
IN_FLIGHT = 512
SIDES = ("dm", "numpy", "tf", "torch", "jax", "jax-device_put", "numpy+torch", "numpy+jax")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(side: str) -> str | None:
    if side == "dm":
        python = os.environ.get(
            "REVERB_PY_DM_REVERB_PYTHON", os.path.join(ROOT, ".venv-reverb/bin/python")
        )
    elif side == "numpy":
        return sys.executable
    else:  # The frameworks' sides, and the numpy iterator in a process that runs one.
        python = os.environ.get(
            "REVERB_PY_FRAMEWORKS_PYTHON", os.path.join(ROOT, ".venv-frameworks/bin/python")
        )
    return python if os.path.exists(python) else None


# ------------------------------------------------------------------ server process


def serve(items: dict[str, int]) -> None:
    """The server process: fills the tables, prints the port, serves until stdin closes."""
    import reverb_py as reverb

    step = small_step()
    frames = frame_pool(64, seed=7)

    def signature(example: dict[str, Any]) -> dict[str, Any]:
        return {
            key: reverb.TensorSpec((1, *np.shape(value)), np.asarray(value).dtype)
            for key, value in example.items()
        }

    frame_step = {"obs": frames[0], "action": step["action"], "reward": step["reward"]}
    tables = [
        reverb.Table(
            name,
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            max(count, 1),
            reverb.rate_limiters.MinSize(1),
            signature=signature(example),
        )
        for name, count, example in (
            ("small", items["small"], step),
            ("frames", items["frames"], frame_step),
        )
    ]
    server = reverb.Server(tables, port=0)
    client = server.localhost_client()
    for name, count in items.items():
        with client.trajectory_writer(1) as writer:
            for index in range(count):
                if name == "frames":
                    writer.append({**frame_step, "obs": frames[index % len(frames)]})
                else:
                    writer.append(step)
                writer.create_item(name, 1.0, {k: writer.history[k][-1:] for k in step})
                if index % 256 == 255:
                    writer.flush()
            writer.flush()
    print(server.port, flush=True)
    sys.stdin.read()
    server.stop()


# ------------------------------------------------------------------ sides


def _start_framework(name: str) -> None:
    """Imports a framework and starts its runtime (as its own iterator's process has)."""
    if name == "jax":
        import jax.numpy as jnp

        jnp.zeros(1).block_until_ready()
    elif name == "torch":
        import torch

        torch.zeros(1).add_(1)
    else:
        raise ValueError(name)


def _batches(side: str, address: str, table: str) -> Any:
    if side.startswith("numpy+"):
        _start_framework(side.partition("+")[2])
        side = "numpy"
    if side == "dm":
        import reverb

        dataset = reverb.TrajectoryDataset.from_table_signature(address, table, IN_FLIGHT)
        return dataset.batch(BATCH).as_numpy_iterator()
    if side == "numpy":
        from reverb_py import data

        return data.TrajectoryIterator.from_table_signature(
            address, table, IN_FLIGHT, batch_size=BATCH
        )
    if side == "tf":
        import reverb_py

        dataset = reverb_py.TrajectoryDataset.from_table_signature(address, table, IN_FLIGHT)
        return dataset.batch(BATCH).as_numpy_iterator()
    if side == "torch":
        import reverb_py.torch

        return iter(
            reverb_py.torch.TrajectoryDataset.from_table_signature(
                address, table, IN_FLIGHT, batch_size=BATCH
            )
        )
    if side in ("jax", "jax-device_put"):
        import reverb_py.jax

        if side == "jax-device_put":
            # What the iterator did before its direct transfer, for the side by side.
            reverb_py.jax._putter = lambda target: functools.partial(  # type: ignore[assignment]
                reverb_py.jax._put, target
            )
        return reverb_py.jax.TrajectoryIterator.from_table_signature(
            address, table, IN_FLIGHT, batch_size=BATCH
        )
    raise ValueError(side)


def run_side(side: str, address: str, table: str, warmup: float, duration: float) -> None:
    """A side process: prints ``{"rate": samples/s, ...}`` as its last line."""
    batches = _batches(side, address, table)
    profile = os.environ.get("REVERB_PY_BENCH_PROFILE") == "1"
    end = time.perf_counter() + warmup
    while time.perf_counter() < end:
        next(batches)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu = time.process_time()
    start = time.perf_counter()
    count = 0
    while True:
        batch = next(batches)
        count += len(batch.info.key)
        now = time.perf_counter()
        if now - start >= duration:
            break
    elapsed = now - start
    cpu = time.process_time() - cpu
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(18)
    print(json.dumps({"rate": count / elapsed, "samples": count, "cpu_per_s": cpu / elapsed}))
    sys.stdout.flush()
    os._exit(0)  # No teardown in the measurement (TF's can take seconds).


# ------------------------------------------------------------------ orchestration


def _measure(
    python: str, side: str, address: str, table: str, args: argparse.Namespace
) -> dict[str, Any]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    if args.profile and side == "numpy":
        env["REVERB_PY_BENCH_PROFILE"] = "1"
    command = [python, "-m", "benchmarks.learner", "--side", side, "--address", address]
    command += ["--table", table, "--warmup", str(args.warmup), "--duration", str(args.duration)]
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"side {side} failed:\n{out.stderr[-3000:]}")
    if args.profile and side == "numpy":
        print(out.stderr[-6000:], file=sys.stderr)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=float, default=None)
    parser.add_argument("--duration", type=float, default=None)
    args = parser.parse_args()
    if args.serve:
        serve(json.loads(args.serve))
        return
    if args.side:
        run_side(args.side, args.address, args.table, args.warmup, args.duration)
        return

    repeats = args.repeats or (2 if args.quick else 3)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.5)
    args.duration = args.duration if args.duration is not None else (1.0 if args.quick else 4.0)
    items = {"small": 2_000, "frames": 300} if args.quick else {"small": 20_000, "frames": 3_000}
    sides = [side for side in args.sides.split(",") if _python(side)]
    skipped = [side for side in args.sides.split(",") if side not in sides]
    if skipped:
        print(f"skipping {skipped}: interpreter not found", file=sys.stderr)

    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.learner", "--serve", json.dumps(items)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    results: dict[str, Any] = {}
    try:
        assert server.stdout is not None
        address = f"localhost:{int(server.stdout.readline())}"
        for table in ("small", "frames"):
            runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
            for rep in range(repeats):
                order = sides if rep % 2 == 0 else list(reversed(sides))
                for side in order:
                    python = _python(side)
                    assert python is not None
                    runs[side].append(_measure(python, side, address, table, args))
                    print(f"{table} {side} rep {rep}: {runs[side][-1]['rate']:,.0f}/s", flush=True)
            rates = {side: median([run["rate"] for run in runs[side]]) for side in sides}
            results[table] = {
                side: {
                    "samples_per_s": rates[side],
                    "runs": [run["rate"] for run in runs[side]],
                    "client_cpu_per_s": median([run["cpu_per_s"] for run in runs[side]]),
                    "ratio_vs_dm": rates[side] / rates["dm"] if "dm" in rates else None,
                }
                for side in sides
            }
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=60)

    report = {
        "benchmark": "learner",
        "machine": machine_info(),
        "config": {
            "quick": args.quick,
            "repeats": repeats,
            "warmup_s": args.warmup,
            "duration_s": args.duration,
            "items": items,
            "batch": BATCH,
            "max_in_flight_samples_per_worker": IN_FLIGHT,
            "server": "one reverb_py server process (compiled), both sides read its tables",
            "alternation": "rep 1 in the listed order, rep 2 reversed, ...",
        },
        "results": results,
    }
    default = "learner_quick.json" if args.quick else "learner.json"
    path = write_json(args.out or os.path.join(ROOT, "benchmarks/results", default), report)
    for table, by_side in results.items():
        for side, result in by_side.items():
            ratio = result["ratio_vs_dm"]
            print(
                f"{table:7s} {side:6s} {result['samples_per_s']:>10,.0f} samples/s"
                + (f"  x{ratio:.2f} vs dm-reverb" if ratio is not None else "")
            )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
