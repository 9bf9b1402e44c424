"""Plots the structures benchmark: ``benchmarks/results/structures.png``.

Usage::

    python -m benchmarks.plot [--in benchmarks/results/structures.json]
                              [--out benchmarks/results/structures.png] [--size 1000000]
    python -m benchmarks.plot --e2e [--in benchmarks/results/e2e.json]
                              [--out benchmarks/results/e2e.png]

With ``--e2e``: one bar per end-to-end workload (rate, log scale), with the Reverb reference
figures (not measured here) drawn as markers where there is one.

Top panel: ops/s (log scale) per structure and operation at one size (default: the
largest measured), compiled vs pure. Bottom panel: the ratio compiled / pure at every
measured size. Needs matplotlib (Agg backend, no display).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import RESULTS_DIR  # noqa: E402

PLOT_OPS = ("insert", "update", "update_many", "sample", "delete")


def plot_e2e(inp: str, out: str) -> pathlib.Path:
    """Bar chart of ``e2e.json``: measured rates, Reverb reference markers."""
    data = json.loads(pathlib.Path(inp).read_text(encoding="utf-8"))
    results = data["results"]
    ref = data.get("reverb_reference", {}).get("values", {})
    names = list(results)
    rates = [results[n]["rate"] for n in names]
    units = [results[n]["unit"] for n in names]
    fig, ax = plt.subplots(figsize=(10, 5))
    y = list(range(len(names)))
    ax.barh(y, rates, color="#1f77b4", label="reverb_py (measured)")
    first = True
    for i, n in enumerate(names):
        r = ref.get(n, {})
        value = next((v for k, v in r.items() if not k.startswith("mb")), None)
        right = rates[i] if value is None else max(rates[i], value)
        if value is not None:
            ax.plot([value], [i], marker="D", color="#d62728", ls="none",
                    label="dm-reverb 0.14 reference (not measured here)" if first else None)
            first = False
        mb = results[n].get("mb_per_s")
        text = f"{rates[i]:,.0f} {units[i]}" + (f", {mb:.0f} MB/s" if mb and mb >= 1 else "")
        ax.text(right * 1.25, i, text, va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlim(right=max(rates + [1]) * 30)
    m = data.get("machine", {})
    ax.set_title(
        f"reverb_py end to end (server process, loopback gRPC) — {m.get('cpu_model', '?')} "
        f"({m.get('cpu_count', '?')} cores), {m.get('date_utc', '')[:10]}",
        fontsize=10,
    )
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.set_xlabel("items, samples or keys per second (log)")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path = pathlib.Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in", dest="inp", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--e2e", action="store_true", help="plot e2e.json instead")
    args = parser.parse_args(argv)
    if args.e2e:
        path = plot_e2e(args.inp or str(RESULTS_DIR / "e2e.json"),
                        args.out or str(RESULTS_DIR / "e2e.png"))
        print(f"# wrote {path}")
        return 0
    args.inp = args.inp or str(RESULTS_DIR / "structures.json")
    args.out = args.out or str(RESULTS_DIR / "structures.png")

    data = json.loads(pathlib.Path(args.inp).read_text(encoding="utf-8"))
    results = data["results"]
    structures = list(results)
    sizes = sorted({int(s) for st in results.values() for s in st})
    size = args.size or max(sizes)
    labels, pure_vals, comp_vals = [], [], []
    for st in structures:
        cell = results[st].get(str(size), {})
        for op in PLOT_OPS:
            labels.append(f"{st}\n{op}")
            p = (cell.get("pure") or {}).get("ops", {}).get(op, {}).get("ops_per_s")
            c = (cell.get("compiled") or {}).get("ops", {}).get(op, {}).get("ops_per_s")
            pure_vals.append(p or 0.0)
            comp_vals.append(c or 0.0)

    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(16, 10), gridspec_kw={"height_ratios": [3, 2]})
    x = range(len(labels))
    w = 0.4
    ax.bar([i - w / 2 for i in x], pure_vals, w, label="pure Python twin", color="#999999")
    ax.bar([i + w / 2 for i in x], comp_vals, w, label="compiled (Cython)", color="#1f77b4")
    ax.set_yscale("log")
    ax.set_ylabel("operations / s (log)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=7)
    for i in range(len(PLOT_OPS), len(labels), len(PLOT_OPS)):
        ax.axvline(i - 0.5, color="#dddddd", lw=0.8)
    m = data.get("machine", {})
    ax.set_title(
        f"reverb_py selector structures at {size:,} keys — {m.get('cpu_model', '?')} "
        f"({m.get('cpu_count', '?')} cores), Python {m.get('python', '?')}, "
        f"{m.get('date_utc', '')[:10]}",
        fontsize=10,
    )
    ax.legend()
    ax.grid(axis="y", which="both", alpha=0.3)

    ratios = data.get("ratios_compiled_over_pure", {})
    width = 0.8 / max(1, len(sizes))
    for j, sz in enumerate(sizes):
        vals = [ratios.get(st, {}).get(str(sz), {}).get(op, 0.0) for st in structures for op in PLOT_OPS]
        ax2.bar([i - 0.4 + width * (j + 0.5) for i in x], vals, width, label=f"{sz:,} keys")
    ax2.axhline(1.0, color="black", lw=0.8)
    ax2.axhline(10.0, color="red", lw=0.8, ls="--", label="10x")
    ax2.set_yscale("log")
    ax2.set_ylabel("compiled / pure")
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(labels, fontsize=7)
    for i in range(len(PLOT_OPS), len(labels), len(PLOT_OPS)):
        ax2.axvline(i - 0.5, color="#dddddd", lw=0.8)
    ax2.legend(fontsize=8)
    ax2.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"# wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
