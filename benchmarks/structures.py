"""Micro-benchmark of the selector structures, pure-Python twins vs compiled (Cython).

Run from the project root::

    python -m benchmarks.structures                 # full run, sizes 1e3, 1e5, 1e6
    python -m benchmarks.structures --quick         # smoke run, tiny sizes
    python -m benchmarks.structures --out benchmarks/results/structures.json

For every structure (SumTree(0.8), IndexedSet, IndexedHeap(min), OrderedKeys(fifo)),
size and implementation it measures operations per second of

* ``insert``       filling an empty structure up to ``size`` keys (``size`` ops);
* ``update``       single ``update(key, priority)`` calls on random existing keys;
* ``update_many``  ``update_many`` with batches of 1,000 random existing keys (counted
                   per key);
* ``sample``       ``sample(u)`` with pre-drawn ``u = random.random()``;
* ``delete``       ``delete(key)`` of distinct random existing keys;
* ``reinsert``     (extra) inserting the deleted keys back, i.e. inserts at ~``size``;
                   this also restores the size for the next repetition.

Each measurement is repeated (3 times by default) and the median kept. Keys are
deduplicated random 64-bit ints; keys, priorities and ``u`` values are drawn before the
timed loops. The garbage collector is disabled inside timed loops (as ``timeit`` does).
To keep the full run short, the number of ops per measurement is capped (``--cap`` for
compiled, ``--pure-cap`` for pure), and for the pure twins at the largest sizes the
fill (insert) is done once instead of once per repetition (``--pure-fill-repeat-max``);
the JSON records how many runs each median comes from.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks._common import (
    RESULTS_DIR,
    fmt_rate,
    implementation,
    machine_info,
    median,
    write_json,
)

STRUCTURES: dict[str, tuple[str, str, Callable[[type], Any]]] = {
    "SumTree": ("sum_tree", "SumTree", lambda cls: cls(0.8)),
    "IndexedSet": ("indexed_set", "IndexedSet", lambda cls: cls()),
    "IndexedHeap": ("indexed_heap", "IndexedHeap", lambda cls: cls(True)),
    "OrderedKeys": ("ordered_keys", "OrderedKeys", lambda cls: cls(False)),
}
STRUCTURE_LABELS = {
    "SumTree": "SumTree(0.8) [Prioritized]",
    "IndexedSet": "IndexedSet [Uniform]",
    "IndexedHeap": "IndexedHeap(min) [MinHeap]",
    "OrderedKeys": "OrderedKeys(fifo) [Fifo]",
}
IMPLS = {"pure": "reverb_py._pure", "compiled": "reverb_py._speedups"}
OPS = ("insert", "update", "update_many", "sample", "delete", "reinsert")
BATCH = 1000


def load_class(impl: str, structure: str) -> type | None:
    module_name, class_name, _ = STRUCTURES[structure]
    try:
        module = importlib.import_module(f"{IMPLS[impl]}.{module_name}")
    except ImportError as error:
        print(f"  !! {impl} {structure}: cannot import ({error})", file=sys.stderr)
        return None
    return getattr(module, class_name)


def unique_keys(n: int, rng: random.Random) -> list[int]:
    seen: set[int] = set()
    out: list[int] = []
    bits = rng.getrandbits
    while len(out) < n:
        k = bits(64)
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


def _timed(fn: Callable[[], None]) -> float:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        gc.enable()


# Timed loops. Bound methods are looked up once; the loop overhead is the same for both
# implementations and is part of what a caller pays.


def _fill(s: Any, keys: list[int], prios: list[float]) -> Callable[[], None]:
    def run() -> None:
        ins = s.insert
        for k, p in zip(keys, prios):
            ins(k, p)

    return run


def _update(s: Any, keys: list[int], prios: list[float]) -> Callable[[], None]:
    def run() -> None:
        upd = s.update
        for k, p in zip(keys, prios):
            upd(k, p)

    return run


def _update_many(s: Any, batches: list[tuple[list[int], list[float]]]) -> Callable[[], None]:
    def run() -> None:
        um = s.update_many
        for ks, ps in batches:
            um(ks, ps)

    return run


def _sample(s: Any, us: list[float]) -> Callable[[], None]:
    def run() -> None:
        smp = s.sample
        for u in us:
            smp(u)

    return run


def _delete(s: Any, keys: list[int]) -> Callable[[], None]:
    def run() -> None:
        dl = s.delete
        for k in keys:
            dl(k)

    return run


def bench_one(
    cls: type,
    factory: Callable[[type], Any],
    keys: list[int],
    prios: list[float],
    n_ops: int,
    repeats: int,
    fill_repeats: int,
    rng: random.Random,
) -> dict[str, Any]:
    size = len(keys)
    runs: dict[str, list[float]] = {op: [] for op in OPS}
    counts: dict[str, int] = {}
    s = None
    for rep in range(repeats):
        if rep < fill_repeats:
            s = None
            gc.collect()
            s = factory(cls)
            dt = _timed(_fill(s, keys, prios))
            runs["insert"].append(size / dt)
            counts["insert"] = size
            assert len(s) == size, (len(s), size)
        assert s is not None
        # update: random existing keys (with replacement), fresh priorities.
        upd_keys = rng.choices(keys, k=n_ops)
        upd_prios = [rng.random() + 1e-3 for _ in range(n_ops)]
        dt = _timed(_update(s, upd_keys, upd_prios))
        runs["update"].append(n_ops / dt)
        counts["update"] = n_ops
        # update_many: batches of BATCH keys (distinct within a batch).
        batch = min(BATCH, size)
        n_batches = max(1, n_ops // batch)
        batches = []
        for _ in range(n_batches):
            ks = rng.sample(keys, batch)
            batches.append((ks, [rng.random() + 1e-3 for _ in range(batch)]))
        dt = _timed(_update_many(s, batches))
        runs["update_many"].append(n_batches * batch / dt)
        counts["update_many"] = n_batches * batch
        # sample
        us = [rng.random() for _ in range(n_ops)]
        dt = _timed(_sample(s, us))
        runs["sample"].append(n_ops / dt)
        counts["sample"] = n_ops
        # delete distinct random existing keys, then put them back (timed as reinsert).
        n_del = min(n_ops, size)
        victims = rng.sample(range(size), n_del)
        del_keys = [keys[i] for i in victims]
        dt = _timed(_delete(s, del_keys))
        runs["delete"].append(n_del / dt)
        counts["delete"] = n_del
        back_prios = [prios[i] for i in victims]
        dt = _timed(_fill(s, del_keys, back_prios))
        runs["reinsert"].append(n_del / dt)
        counts["reinsert"] = n_del
        assert len(s) == size, (len(s), size)
        # Leaves the ids/order changed by delete+reinsert in place: later reps see a
        # "used" structure, as a table does.
    del s
    gc.collect()
    return {
        op: {"ops_per_s": median(runs[op]), "runs": runs[op], "ops_per_run": counts[op]}
        for op in OPS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, smoke run")
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--sizes", default=None, help="comma-separated sizes (overrides)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cap", type=int, default=200_000, help="max ops per measurement (compiled)"
    )
    parser.add_argument(
        "--pure-cap", type=int, default=100_000, help="max ops per measurement (pure)"
    )
    parser.add_argument(
        "--pure-fill-repeat-max",
        type=int,
        default=100_000,
        help="pure twins re-fill for every repetition only up to this size (else fill once)",
    )
    parser.add_argument("--structures", default=",".join(STRUCTURES), help="comma-separated subset")
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args(argv)

    if args.sizes:
        sizes = [int(float(x)) for x in args.sizes.split(",")]
    elif args.quick:
        sizes = [10**2, 10**3]
    else:
        sizes = [10**3, 10**5, 10**6]
    if args.quick:
        args.cap = min(args.cap, 2_000)
        args.pure_cap = min(args.pure_cap, 2_000)
    out = args.out or str(
        RESULTS_DIR / ("structures_quick.json" if args.quick else "structures.json")
    )
    structures = [s for s in args.structures.split(",") if s]

    info = machine_info()
    impl_live = implementation()
    print(
        f"# {info['cpu_model']} x{info['cpu_count']}, Python {info['python']}, "
        f"package IMPLEMENTATION={impl_live}"
    )
    results: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    started = time.perf_counter()
    rng_data = random.Random(args.seed)
    for size in sizes:
        keys = unique_keys(size, rng_data)
        prios = [rng_data.random() + 1e-3 for _ in range(size)]
        for structure in structures:
            _, _, factory = STRUCTURES[structure]
            per_impl: dict[str, Any] = {}
            for impl in ("pure", "compiled"):
                cls = load_class(impl, structure)
                if cls is None:
                    per_impl[impl] = None
                    continue
                cap = args.pure_cap if impl == "pure" else args.cap
                n_ops = min(size, cap)
                fill_repeats = args.repeats
                if impl == "pure" and size > args.pure_fill_repeat_max:
                    fill_repeats = 1
                t0 = time.perf_counter()
                res = bench_one(
                    cls,
                    factory,
                    keys,
                    prios,
                    n_ops,
                    args.repeats,
                    fill_repeats,
                    random.Random(args.seed + size),
                )
                per_impl[impl] = {
                    "module": f"{cls.__module__}.{cls.__name__}",
                    "ops": res,
                    "seconds": time.perf_counter() - t0,
                }
                line = "  ".join(f"{op}={fmt_rate(res[op]['ops_per_s'])}" for op in OPS)
                print(
                    f"{structure:<12} n={size:<8} {impl:<8} {line}  "
                    f"({time.perf_counter() - t0:.1f}s)",
                    flush=True,
                )
            results.setdefault(structure, {})[str(size)] = per_impl
            if per_impl.get("pure") and per_impl.get("compiled"):
                r = {
                    op: per_impl["compiled"]["ops"][op]["ops_per_s"]
                    / per_impl["pure"]["ops"][op]["ops_per_s"]
                    for op in OPS
                }
                ratios.setdefault(structure, {})[str(size)] = r
                print(
                    f"{'':<12} n={size:<8} ratio    "
                    + "  ".join(f"{op}={r[op]:.1f}x" for op in OPS),
                    flush=True,
                )
    total = time.perf_counter() - started
    data = {
        "benchmark": "structures",
        "machine": info,
        "implementation": impl_live,
        "config": {
            "sizes": sizes,
            "repeats": args.repeats,
            "cap_compiled": args.cap,
            "cap_pure": args.pure_cap,
            "pure_fill_repeat_max": args.pure_fill_repeat_max,
            "update_many_batch": BATCH,
            "priority_exponent": 0.8,
            "quick": args.quick,
            "gc_disabled_in_timed_loops": True,
            "seed": args.seed,
        },
        "structure_labels": STRUCTURE_LABELS,
        "ops": list(OPS),
        "results": results,
        "ratios_compiled_over_pure": ratios,
        "total_seconds": total,
    }
    path = write_json(out, data)
    print(f"# wrote {path} in {total:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
