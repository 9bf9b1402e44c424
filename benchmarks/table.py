"""Table-level benchmark: in-process asyncio Table, compiled vs pure structures.

Run from the project root::

    python -m benchmarks.table [--out benchmarks/results/table.json] [--quick]

The parent process runs the measurements twice, in two subprocesses: one with the
compiled structures (``IMPLEMENTATION == "cython"``) and one with
``REVERB_PY_NO_EXTENSIONS=1`` (the pure-Python twins), then records both and the ratios
compiled / pure.

For each sampler (``Uniform()``, ``Prioritized(0.8)``), with ``max_size = 10**5``, a
``Fifo()`` remover and ``MinSize(1)``:

* ``insert_fill``   ``await table.insert(Item(key, priority))`` filling an empty table to
                    ``10**5`` items (items/s);
* ``insert_full``   the same into the full table, each insert evicting the oldest item
                    (the steady state; items/s);
* ``sample_1``      ``await table.sample(1)`` calls (samples/s);
* ``sample_100``    ``await table.sample(100)`` calls (samples/s);
* ``mutate_1000``   ``table.mutate(updates={...1,000 keys...})`` (keys/s).

``Item`` objects, keys (deduplicated random uint64) and priority dicts are built before
the timed loops; the garbage collector stays enabled (``gc.collect()`` before each
measurement), as in a server. Each measurement is repeated 3 times, the median is kept.

``--worker`` runs the measurements in this process (whatever ``IMPLEMENTATION`` is) and
writes JSON; ``--profile`` prints a cProfile of the insert and sample paths instead.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks._common import RESULTS_DIR, fmt_rate, machine_info, median, write_json

ROOT = pathlib.Path(__file__).resolve().parent.parent
METRICS = ("insert_fill", "insert_full", "sample_1", "sample_100", "mutate_1000")
UNITS = {
    "insert_fill": "items/s",
    "insert_full": "items/s",
    "sample_1": "samples/s",
    "sample_100": "samples/s",
    "mutate_1000": "keys/s",
}
SAMPLERS = ("Uniform", "Prioritized(0.8)")
TARGETS = {  # metric -> minimum, compiled build
    "insert_fill": 100_000,
    "insert_full": 100_000,
    "sample_1": 100_000,
    "sample_100": 100_000,
    "mutate_1000": 1_000_000,
}


# ---------------------------------------------------------------------------- worker


def _make_table(sampler_name: str, max_size: int) -> Any:
    from reverb_py import rate_limiters, selectors
    from reverb_py.table import Table

    sampler = selectors.Uniform() if sampler_name == "Uniform" else selectors.Prioritized(0.8)
    return Table(
        "bench",
        sampler=sampler,
        remover=selectors.Fifo(),
        max_size=max_size,
        rate_limiter=rate_limiters.MinSize(1),
    )


def _unique_keys(n: int, rng: random.Random, taken: set[int]) -> list[int]:
    out: list[int] = []
    bits = rng.getrandbits
    while len(out) < n:
        k = bits(64)
        if k not in taken:
            taken.add(k)
            out.append(k)
    return out


def _items(keys: list[int], rng: random.Random) -> list[Any]:
    from reverb_py.table import Item

    return [Item(k, rng.random() + 1e-3) for k in keys]


async def _insert_all(table: Any, items: list[Any]) -> float:
    ins = table.insert
    gc.collect()
    t0 = time.perf_counter()
    for item in items:
        await ins(item)
    return time.perf_counter() - t0


async def _sample_calls(table: Any, calls: int, batch: int) -> tuple[float, int]:
    smp = table.sample
    got = 0
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(calls):
        got += len(await smp(batch))
    return time.perf_counter() - t0, got


def _mutate_calls(table: Any, updates: list[dict[int, float]]) -> float:
    mut = table.mutate
    gc.collect()
    t0 = time.perf_counter()
    for upd in updates:
        mut(updates=upd)
    return time.perf_counter() - t0


async def _bench_sampler(sampler_name: str, cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    size = cfg["size"]
    n_ops = cfg["ops"]
    repeats = cfg["repeats"]
    runs: dict[str, list[float]] = {m: [] for m in METRICS}
    counts: dict[str, int] = {}
    table = None
    taken: set[int] = set()
    for rep in range(repeats):
        # insert_fill: fresh table, 0 -> size.
        table = None
        gc.collect()
        table = _make_table(sampler_name, size)
        items = _items(_unique_keys(size, rng, taken), rng)
        dt = await _insert_all(table, items)
        assert len(table) == size
        runs["insert_fill"].append(size / dt)
        counts["insert_fill"] = size
        del items
        # insert_full: new keys into the full table, each evicts the oldest.
        items = _items(_unique_keys(n_ops, rng, taken), rng)
        dt = await _insert_all(table, items)
        assert len(table) == size
        runs["insert_full"].append(n_ops / dt)
        counts["insert_full"] = n_ops
        present = [it.key for it in items[-size:]]
        if len(present) < size:
            present = list(table._items)  # noqa: SLF001 - benchmark only, untimed
        del items
        # sample(1)
        dt, got = await _sample_calls(table, n_ops, 1)
        assert got == n_ops
        runs["sample_1"].append(got / dt)
        counts["sample_1"] = got
        # sample(100)
        calls = max(1, n_ops // 100)
        dt, got = await _sample_calls(table, calls, 100)
        assert got == calls * 100, got
        runs["sample_100"].append(got / dt)
        counts["sample_100"] = got
        # mutate: 1,000 existing keys per call.
        n_calls = max(1, n_ops // 1000)
        updates = [
            {k: rng.random() + 1e-3 for k in rng.sample(present, min(1000, len(present)))}
            for _ in range(n_calls)
        ]
        n_keys = sum(len(u) for u in updates)
        dt = _mutate_calls(table, updates)
        runs["mutate_1000"].append(n_keys / dt)
        counts["mutate_1000"] = n_keys
        assert len(table) == size
    del table
    gc.collect()
    return {
        m: {"rate": median(runs[m]), "unit": UNITS[m], "runs": runs[m], "ops_per_run": counts[m]}
        for m in METRICS
    }


def run_worker(cfg: dict[str, Any]) -> dict[str, Any]:
    from reverb_py import _impl

    out: dict[str, Any] = {
        "implementation": _impl.IMPLEMENTATION,
        "no_extensions_env": os.environ.get("REVERB_PY_NO_EXTENSIONS", ""),
        "sampler_structure": {},
        "results": {},
    }
    for i, sampler_name in enumerate(SAMPLERS):
        t0 = time.perf_counter()
        res = asyncio.run(_bench_sampler(sampler_name, cfg, cfg["seed"] + i))
        out["results"][sampler_name] = res
        probe = _make_table(sampler_name, 1)
        out["sampler_structure"][sampler_name] = (
            f"{type(probe._sampler).__module__}.{type(probe._sampler).__name__}"  # noqa: SLF001
        )
        print(
            f"[{_impl.IMPLEMENTATION}] {sampler_name:<17} "
            + "  ".join(f"{m}={fmt_rate(res[m]['rate'])}" for m in METRICS)
            + f"  ({time.perf_counter() - t0:.1f}s)",
            file=sys.stderr,
            flush=True,
        )
    return out


def run_profile(cfg: dict[str, Any], sampler_name: str, top: int) -> None:
    """cProfile of insert_full + sample(1) + sample(100) + mutate on a filled table."""
    import cProfile
    import pstats

    from reverb_py import _impl

    rng = random.Random(cfg["seed"])
    size, n_ops = cfg["size"], cfg["ops"]
    taken: set[int] = set()

    async def body() -> None:
        table = _make_table(sampler_name, size)
        await _insert_all(table, _items(_unique_keys(size, rng, taken), rng))
        items = _items(_unique_keys(n_ops, rng, taken), rng)
        keys = [it.key for it in items[-size:]]  # present after the insert phase
        updates = [{k: rng.random() + 1e-3 for k in rng.sample(keys, 1000)} for _ in range(100)]
        for label, coro_fn in (
            ("insert (full table)", lambda: _insert_all(table, items)),
            ("sample(1)", lambda: _sample_calls(table, n_ops, 1)),
            ("sample(100)", lambda: _sample_calls(table, n_ops // 100, 100)),
        ):
            prof = cProfile.Profile()
            prof.enable()
            await coro_fn()
            prof.disable()
            print(f"\n===== [{_impl.IMPLEMENTATION}] {sampler_name}: {label}, {n_ops} ops =====")
            pstats.Stats(prof).sort_stats("tottime").print_stats(top)
        assert all(k in table for k in updates[0])
        prof = cProfile.Profile()
        prof.enable()
        _mutate_calls(table, updates)
        prof.disable()
        print(f"\n===== [{_impl.IMPLEMENTATION}] {sampler_name}: mutate 100 x 1000 keys =====")
        pstats.Stats(prof).sort_stats("tottime").print_stats(top)

    asyncio.run(body())


# ---------------------------------------------------------------------------- parent


def _spawn(cfg_args: list[str], pure: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("REVERB_PY_NO_EXTENSIONS", None)
    if pure:
        env["REVERB_PY_NO_EXTENSIONS"] = "1"
    with tempfile.NamedTemporaryFile(prefix="reverb_bench_", suffix=".json", delete=False) as f:
        tmp = f.name
    try:
        cmd = [sys.executable, "-m", "benchmarks.table", "--worker", "--worker-out", tmp, *cfg_args]
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        with open(tmp, encoding="utf-8") as fh:
            return json.load(fh)
    finally:
        os.unlink(tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--quick", action="store_true", help="small table, smoke run")
    parser.add_argument("--size", type=int, default=None, help="max_size / items (default 1e5)")
    parser.add_argument("--ops", type=int, default=None, help="ops per measurement (default 1e5)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=4242)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help="print cProfile of the hot paths")
    parser.add_argument("--profile-sampler", default="Prioritized(0.8)", choices=SAMPLERS)
    parser.add_argument("--profile-top", type=int, default=15)
    args = parser.parse_args(argv)

    size = args.size or (2_000 if args.quick else 100_000)
    ops = args.ops or (2_000 if args.quick else 100_000)
    cfg = {"size": size, "ops": ops, "repeats": args.repeats, "seed": args.seed}

    if args.profile:
        run_profile(cfg, args.profile_sampler, args.profile_top)
        return 0
    if args.worker:
        data = run_worker(cfg)
        if args.worker_out:
            write_json(args.worker_out, data)
        else:
            print(json.dumps(data, indent=2))
        return 0

    out = args.out or str(RESULTS_DIR / ("table_quick.json" if args.quick else "table.json"))
    cfg_args = [
        "--size",
        str(size),
        "--ops",
        str(ops),
        "--repeats",
        str(args.repeats),
        "--seed",
        str(args.seed),
    ]
    info = machine_info()
    started = time.perf_counter()
    compiled = _spawn(cfg_args, pure=False)
    pure = _spawn(cfg_args, pure=True)
    warnings = []
    if compiled["implementation"] != "cython":
        warnings.append(
            f"the 'compiled' subprocess ran IMPLEMENTATION={compiled['implementation']!r}: "
            "the extensions are not built; its numbers are NOT compiled numbers"
        )
    if pure["implementation"] != "python":
        warnings.append(f"the pure subprocess ran IMPLEMENTATION={pure['implementation']!r}")
    ratios: dict[str, dict[str, float]] = {}
    targets: dict[str, dict[str, Any]] = {}
    for sampler_name in SAMPLERS:
        c = compiled["results"][sampler_name]
        p = pure["results"][sampler_name]
        ratios[sampler_name] = {m: c[m]["rate"] / p[m]["rate"] for m in METRICS}
        targets[sampler_name] = {
            m: {"target": TARGETS[m], "compiled": c[m]["rate"], "met": c[m]["rate"] >= TARGETS[m]}
            for m in METRICS
        }
    data = {
        "benchmark": "table",
        "machine": info,
        "config": {
            **cfg,
            "remover": "Fifo()",
            "rate_limiter": "MinSize(1)",
            "samplers": list(SAMPLERS),
            "mutate_keys_per_call": 1000,
            "gc_enabled": True,
            "items_prebuilt_outside_timing": True,
            "quick": args.quick,
        },
        "units": UNITS,
        "compiled": compiled,
        "pure": pure,
        "ratios_compiled_over_pure": ratios,
        "targets": targets,
        "warnings": warnings,
        "total_seconds": time.perf_counter() - started,
    }
    path = write_json(out, data)
    print(flush=True)
    print(f"{'sampler':<17} {'metric':<12} {'compiled':>10} {'pure':>10} {'ratio':>7}")
    for sampler_name in SAMPLERS:
        for m in METRICS:
            print(
                f"{sampler_name:<17} {m:<12} "
                f"{fmt_rate(compiled['results'][sampler_name][m]['rate']):>10} "
                f"{fmt_rate(pure['results'][sampler_name][m]['rate']):>10} "
                f"{ratios[sampler_name][m]:>6.1f}x"
            )
    for w in warnings:
        print(f"WARNING: {w}")
    print(f"# wrote {path} in {data['total_seconds']:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
