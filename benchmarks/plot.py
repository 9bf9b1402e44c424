"""Plots the structures benchmark: ``benchmarks/results/structures.png``.

Usage::

    python -m benchmarks.plot [--in benchmarks/results/structures.json]
                              [--out benchmarks/results/structures.png] [--size 1000000]
    python -m benchmarks.plot --e2e [--in benchmarks/results/e2e.json]
                              [--out benchmarks/results/e2e.png]
    python -m benchmarks.plot --checkpoint [--in ...] [--out ...]
    python -m benchmarks.plot --compare [--in benchmarks/results/compare.json]
                              [--out benchmarks/results/compare.png]
    python -m benchmarks.plot --learner [--in benchmarks/results/learner.json]
                              [--out benchmarks/results/learner.png]

With ``--e2e``: one bar per end-to-end workload (rate, log scale), with the Reverb reference
figures (not measured here) drawn as markers where there is one.
With ``--checkpoint`` (``results/checkpoint.json`` -> ``results/checkpoint.png``): save,
restore and in-process load seconds per workload, Reverb reference markers likewise.
With ``--compare`` (``results/compare.json`` -> ``results/compare.png``): grouped bars,
reverb_py vs dm-reverb, per workload (rates on a log scale; checkpoint seconds; bytes per
item), each group labelled with its ratio (> 1: reverb_py better), green when the target
is met.

Top panel: ops/s (log scale) per structure and operation at one size (default: the
largest measured), compiled vs pure. Bottom panel: the ratio compiled / pure at every
measured size. Needs matplotlib (Agg backend, no display).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks._common import RESULTS_DIR  # noqa: E402

PLOT_OPS = ("insert", "update", "update_many", "sample", "delete")


def _save(fig: plt.Figure, out: str) -> pathlib.Path:
    """Lays ``fig`` out, writes it to ``out`` (PNG) and closes it."""
    fig.tight_layout()
    path = pathlib.Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
            ax.plot(
                [value],
                [i],
                marker="D",
                color="#d62728",
                ls="none",
                label="dm-reverb 0.14 reference (not measured here)" if first else None,
            )
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
    return _save(fig, out)


def plot_checkpoint(inp: str, out: str) -> pathlib.Path:
    """Bar chart of ``checkpoint.json``: save, restore (new process) and the in-process
    load per workload, with the Reverb reference figures (not measured here) as markers."""
    data = json.loads(pathlib.Path(inp).read_text(encoding="utf-8"))
    results = data["results"]
    ref = data.get("reverb_reference", {}).get("values", {})
    names = list(results)
    series = (
        ("save", lambda r: r["save"]["seconds"], "#1f77b4", "save_s"),
        (
            "restore (new process until server_info)",
            lambda r: r["restore"]["seconds"],
            "#ff7f0e",
            "restore_s",
        ),
        (
            "load_latest + Table.restore alone (in a server process)",
            lambda r: r["restore_in_process"]["total_s"],
            "#ffbb78",
            None,
        ),
    )
    fig, ax = plt.subplots(figsize=(10, 4.5))
    h = 0.27
    first = True
    right = 0.0
    for j, (label, get, color, ref_key) in enumerate(series):
        ys = [i + (j - 1) * h for i in range(len(names))]
        vals = [get(results[n]) for n in names]
        ax.barh(ys, vals, h, color=color, label=label)
        for y, v, n in zip(ys, vals, names):
            ax.text(v, y, f" {v:.2f} s", va="center", fontsize=7)
            right = max(right, v)
            rv = ref.get(n, {}).get(ref_key) if ref_key else None
            if rv is not None:
                ax.plot(
                    [rv],
                    [y],
                    marker="D",
                    color="#d62728",
                    ls="none",
                    label="dm-reverb 0.14 reference (not measured here)" if first else None,
                )
                first = False
                right = max(right, rv)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(
        [
            f"{n}\n{results[n]['items']:,} items, "
            f"{results[n]['checkpoint_size']['bytes'] / 1e6:.0f} MB"
            for n in names
        ],
        fontsize=8,
    )
    ax.invert_yaxis()
    ax.set_xlim(0, right * 1.2)
    m = data.get("machine", {})
    ax.set_title(
        f"reverb_py checkpoints (server process, client.checkpoint() / restart) — "
        f"{m.get('cpu_model', '?')} ({m.get('cpu_count', '?')} cores), "
        f"{m.get('date_utc', '')[:10]}",
        fontsize=9,
    )
    ax.set_xlabel("seconds (median of 3)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _save(fig, out)


COMPARE_SHORT = {
    "insert_small": "insert\nsmall",
    "insert_frames": "insert\nframes",
    "insert_seq": "insert\nlength-10",
    "sample_small_uniform": "sample small\nUniform",
    "sample_small_prioritized": "sample small\nPrioritized",
    "sample_frames_uniform": "sample frames\nUniform",
    "sample_frames_prioritized": "sample frames\nPrioritized",
    "mutate": "mutate\n(keys/s)",
    "insert_small_flush5": "insert\nsmall\nflush(5)",
    "insert_frames_flush5": "insert\nframes\nflush(5)",
    "insert_seq_flush5": "insert\nlength-10\nflush(5)",
    "writers_8": "8 writers\n(2 procs\nx 4 threads)",
    "writers_32_aio": "32 aio\nwriters\n(vs dm 8)",
    "checkpoint_save_small": "save\nsmall",
    "checkpoint_save_frames": "save\nframes",
    "checkpoint_restore_small": "restart\nsmall",
    "checkpoint_restore_frames": "restart\nframes",
    "memory_small": "small\nitem",
    "memory_frames": "frame\nitem",
}


def plot_compare(inp: str, out: str) -> pathlib.Path:
    """Grouped bars of ``compare.json``: reverb_py vs dm-reverb per workload, the ratio
    (> 1: reverb_py better) above each group, green when its target is met, red if not."""
    data = json.loads(pathlib.Path(inp).read_text(encoding="utf-8"))
    res = data["results"]
    # label, reverb_py value, dm-reverb value, ratio, target met, target
    rows: list[tuple[str, float, float, float, bool, float]] = []
    for name, r in res.items():
        if r["group"] in ("checkpoint", "memory", "server_cpu") or r["unit"] == "ms":
            continue  # not a rate: in the table of benchmarks/README.md only
        if "ratio_samples" in r:
            k = name.split("_")[-1]
            rows.append(
                (
                    f"{k} actor{'s' if k != '1' else ''}\n+ learner\ninserts",
                    r["reverb_py"]["value"],
                    r["dm_reverb"]["value"],
                    r["ratio"],
                    r["target"]["met"],
                    r["target"]["min_ratio"],
                )
            )
            rows.append(
                (
                    f"{k} actor{'s' if k != '1' else ''}\n+ learner\nsamples",
                    r["reverb_py"]["samples_per_s"],
                    r["dm_reverb"]["samples_per_s"],
                    r["ratio_samples"],
                    r["target"]["met"],
                    r["target"]["min_ratio"],
                )
            )
        else:
            rows.append(
                (
                    COMPARE_SHORT.get(name, name),
                    r["reverb_py"]["value"],
                    r["dm_reverb"]["value"],
                    r["ratio"],
                    r["target"]["met"],
                    r["target"]["min_ratio"],
                )
            )

    def panel(
        ax: plt.Axes,
        items: list[tuple[str, float, float, float, bool, float]],
        ylabel: str,
        log: bool,
        fmt: str,
    ) -> None:
        x = list(range(len(items)))
        w = 0.38
        py = [i[1] for i in items]
        dm = [i[2] for i in items]
        ax.bar([i - w / 2 for i in x], py, w, color="#1f77b4", label="reverb_py")
        ax.bar([i + w / 2 for i in x], dm, w, color="#ff7f0e", label="dm-reverb 0.14")
        for i, (_, a, b, ratio, met, target) in enumerate(items):
            ax.text(i - w / 2, a, format(a, fmt), ha="center", va="bottom", fontsize=6, rotation=90)
            ax.text(i + w / 2, b, format(b, fmt), ha="center", va="bottom", fontsize=6, rotation=90)
            top = max(a, b)
            ax.text(
                i,
                top * (4.0 if log else 1.22),
                f"×{ratio:.2f}\n(≥ {target:g})",
                ha="center",
                va="bottom",
                fontsize=8,
                fontweight="bold",
                color="#2ca02c" if met else "#d62728",
            )
        if log:
            ax.set_yscale("log")
            lo = min(v for i in items for v in (i[1], i[2]) if v > 0)
            hi = max(v for i in items for v in (i[1], i[2]))
            ax.set_ylim(lo / 3, hi * 25)
        else:
            ax.set_ylim(0, max(v for i in items for v in (i[1], i[2])) * 1.45)
        ax.set_xticks(x)
        ax.set_xticklabels([i[0] for i in items], fontsize=7)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", which="both", alpha=0.3)

    fig = plt.figure(figsize=(16, 10))
    grid = fig.add_gridspec(2, 2, height_ratios=[3, 2], width_ratios=[2, 1])
    ax1 = fig.add_subplot(grid[0, :])
    panel(ax1, rows, "items, samples or keys per second (log)", True, ",.0f")
    ax1.legend(loc="upper left", fontsize=8)
    m = data.get("machine", {})
    ax1.set_title(
        f"reverb_py vs dm-reverb 0.14, same workloads through the public API, servers and "
        f"clients in separate processes over loopback — {m.get('cpu_model', '?')} "
        f"({m.get('cpu_count', '?')} cores), {m.get('date_utc', '')[:10]}\nmedians of "
        f"{data['config']['repeats']} alternating repetitions; ×ratio > 1 = reverb_py better "
        "(green: target met, red: missed)",
        fontsize=9,
    )
    ckpt = [
        (
            COMPARE_SHORT.get(n, n),
            r["reverb_py"]["value"],
            r["dm_reverb"]["value"],
            r["ratio"],
            r["target"]["met"],
            r["target"]["min_ratio"],
        )
        for n, r in res.items()
        if r["group"] == "checkpoint"
    ]
    if ckpt:
        ax2 = fig.add_subplot(grid[1, 0])
        vals = [v for i in ckpt for v in (i[1], i[2]) if v > 0]
        panel(ax2, ckpt, "seconds (lower is better)", max(vals) / min(vals) > 30, ".2f")
        names = [n for n, r in res.items() if r["group"] == "checkpoint"]
        first = True
        for i, n in enumerate(names):
            r = res[n]
            if "spawn_and_imports_s" not in r["reverb_py"]:
                continue
            for dx, s in ((-0.19, "reverb_py"), (0.19, "dm_reverb")):
                ax2.bar(
                    i + dx,
                    r[s]["spawn_and_imports_s"],
                    0.38,
                    fill=False,
                    hatch="///",
                    edgecolor="#333333",
                    lw=0,
                    label="of which interpreter start + import" if first else None,
                )
                first = False
        ax2.legend(loc="upper left", fontsize=7)
        ax2.set_title(
            f"checkpoint: client.checkpoint() and restart until serving "
            f"({data['config']['small_items']:,} small / "
            f"{data['config']['frame_items']:,} frame items)",
            fontsize=9,
        )
    mem = [
        (
            COMPARE_SHORT.get(n, n),
            r["reverb_py"]["value"],
            r["dm_reverb"]["value"],
            r["ratio"],
            r["target"]["met"],
            r["target"]["min_ratio"],
        )
        for n, r in res.items()
        if r["group"] == "memory"
    ]
    if mem:
        ax3 = fig.add_subplot(grid[1, 1])
        panel(ax3, mem, "server RSS bytes per item (lower is better)", False, ",.0f")
        ax3.set_title("server memory per item", fontsize=9)
    return _save(fig, out)


def plot_hostile(inp: str, soak: str, out: str) -> pathlib.Path:
    """Server RSS over time under misbehaving clients (both systems), and the soak."""
    data = json.loads(pathlib.Path(inp).read_text(encoding="utf-8"))
    soak_data = (
        json.loads(pathlib.Path(soak).read_text(encoding="utf-8"))
        if pathlib.Path(soak).exists()
        else None
    )
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    colors = {"reverb_py": "#1f77b4", "dm_reverb": "#d62728"}
    titles = {
        "stalled": "10 sample streams of 2^31-1 samples that never read",
        "steady": "one reader of 2^31-1 samples, as fast as it can",
    }
    for ax, scenario in zip(axes, ("stalled", "steady")):
        for system, figures in data["systems"].items():
            curve = figures["scenarios"].get(scenario, {}).get("rss_curve", [])
            if curve:
                ax.plot(
                    [t for t, _ in curve], [r for _, r in curve], label=system, color=colors[system]
                )
        ax.set_title(titles[scenario], fontsize=9)
        ax.set_xlabel("seconds")
        ax.set_ylabel("server RSS (MiB)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    ax = axes[2]
    if soak_data:
        curve = soak_data["rss_curve_mib"]
        ax.plot([t for t, _ in curve], [r for _, r in curve], color=colors["reverb_py"])
        ax.set_title(
            f"soak: {soak_data['actors']} actors + learner, {soak_data['seconds']:.0f} s "
            f"({'passed' if soak_data['passed'] else 'FAILED'})",
            fontsize=9,
        )
        ax.set_xlabel("seconds")
        ax.set_ylabel("server RSS (MiB)")
        ax.set_ylim(bottom=0)
    fig.suptitle(
        f"{data['items']} items of 1 MiB per server; {data['machine'].get('date_utc', '')}",
        fontsize=9,
    )
    return _save(fig, out)


def plot_learner(inp: str, out: str) -> pathlib.Path:
    """Samples/s delivered to the learner's loop per side and table, with each side's
    ratio to dm-reverb's dataset (one run)."""
    data = json.loads(pathlib.Path(inp).read_text(encoding="utf-8"))
    tables = list(data["results"])
    fig, axes = plt.subplots(1, len(tables), figsize=(6.5 * len(tables), 4.5), squeeze=False)
    for ax, table in zip(axes[0], tables):
        sides = data["results"][table]
        names = list(sides)
        rates = [sides[name]["samples_per_s"] for name in names]
        colors = ["#d62728" if name == "dm" else "#1f77b4" for name in names]
        bars = ax.bar(range(len(names)), rates, color=colors)
        for bar, name in zip(bars, names):
            ratio = sides[name].get("ratio_vs_dm")
            if ratio is not None and name != "dm":
                ax.annotate(
                    f"x{ratio:.2f}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(
            ["dm-reverb" if name == "dm" else name for name in names], rotation=20, fontsize=8
        )
        ax.set_ylabel("samples/s delivered (batches of 256)")
        ax.set_title(f"table '{table}'", fontsize=9)
    fig.suptitle(
        f"learner input vs dm-reverb's TrajectoryDataset; {data['machine'].get('date_utc', '')}",
        fontsize=9,
    )
    return _save(fig, out)


def plot_writers_window(inputs: list[str], out: str) -> pathlib.Path:
    """The 8 blocking writers at several flush windows (``benchmarks.compare --phases
    writers --writers-flush N``, one file per window): items/s of both systems with the
    ratio, and each system's CPU per item, clients' and server's, stacked."""
    rows = []
    machine: dict[str, Any] = {}
    for inp in inputs:
        data = json.loads(pathlib.Path(inp).read_text(encoding="utf-8"))
        machine = machine or data.get("machine", {})
        r = data["results"]["writers_8"]
        flush = data["config"]["writers"]["flush"]
        per_item = {}
        for side in ("reverb_py", "dm_reverb"):
            x = r[side]
            rate = x["value"]
            per_item[side] = (
                x["client_cpu_per_wall_s"] / rate * 1e6,
                x["server_cpu_per_wall_s"] / rate * 1e6,
            )
        rows.append((flush, r["reverb_py"]["value"], r["dm_reverb"]["value"], r["ratio"], per_item))
    rows.sort()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = list(range(len(rows)))
    w = 0.38
    colors = {"reverb_py": "#1f77b4", "dm_reverb": "#ff7f0e"}
    for offset, side, i in ((-w / 2, "reverb_py", 1), (w / 2, "dm_reverb", 2)):
        ax1.bar(
            [k + offset for k in x], [row[i] for row in rows], w, color=colors[side], label=side
        )
    for k, row in enumerate(rows):
        ax1.text(k, max(row[1], row[2]) * 1.03, f"×{row[3]:.2f}", ha="center", fontsize=9)
    ax1.set_ylim(0, max(max(row[1], row[2]) for row in rows) * 1.2)
    ax1.set_ylabel("items/s, 8 writers together")
    ax1.legend(fontsize=7, loc="upper left")
    for offset, side in ((-w / 2, "reverb_py"), (w / 2, "dm_reverb")):
        client = [row[4][side][0] for row in rows]
        server = [row[4][side][1] for row in rows]
        xs = [k + offset for k in x]
        ax2.bar(xs, client, w, color=colors[side], label=f"{side}: clients")
        ax2.bar(
            xs, server, w, bottom=client, color=colors[side], alpha=0.45, label=f"{side}: server"
        )
    ax2.set_ylabel("CPU µs per item")
    ax2.legend(fontsize=7)
    for ax in (ax1, ax2):
        ax.set_xticks(x)
        ax.set_xticklabels([f"flush({row[0]})" for row in rows])
        ax.grid(axis="y", alpha=0.3)
    m = machine
    fig.suptitle(
        "8 blocking writers (2 processes x 4 threads), small steps, reverb_py vs dm-reverb "
        f"0.14 by flush window — {m.get('cpu_model', '?')} ({m.get('cpu_count', '?')} "
        f"cores), {m.get('date_utc', '')[:10]}",
        fontsize=9,
    )
    return _save(fig, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in", dest="inp", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--e2e", action="store_true", help="plot e2e.json instead")
    parser.add_argument("--checkpoint", action="store_true", help="plot checkpoint.json instead")
    parser.add_argument(
        "--compare", action="store_true", help="plot compare.json (reverb_py vs dm-reverb) instead"
    )
    parser.add_argument(
        "--hostile", action="store_true", help="plot hostile.json and soak.json instead"
    )
    parser.add_argument("--learner", action="store_true", help="plot learner.json instead")
    parser.add_argument(
        "--writers-window",
        nargs="+",
        metavar="COMPARE_JSON",
        help="plot the 8 writers of these writers-phase compare runs, one per flush window",
    )
    args = parser.parse_args(argv)
    if args.writers_window:
        path = plot_writers_window(
            args.writers_window, args.out or str(RESULTS_DIR / "writers_window.png")
        )
        print(f"# wrote {path}")
        return 0
    if args.learner:
        path = plot_learner(
            args.inp or str(RESULTS_DIR / "learner.json"),
            args.out or str(RESULTS_DIR / "learner.png"),
        )
        print(f"# wrote {path}")
        return 0
    if args.hostile:
        path = plot_hostile(
            args.inp or str(RESULTS_DIR / "hostile.json"),
            str(RESULTS_DIR / "soak.json"),
            args.out or str(RESULTS_DIR / "hostile.png"),
        )
        print(f"# wrote {path}")
        return 0
    if args.compare:
        path = plot_compare(
            args.inp or str(RESULTS_DIR / "compare.json"),
            args.out or str(RESULTS_DIR / "compare.png"),
        )
        print(f"# wrote {path}")
        return 0
    if args.checkpoint:
        path = plot_checkpoint(
            args.inp or str(RESULTS_DIR / "checkpoint.json"),
            args.out or str(RESULTS_DIR / "checkpoint.png"),
        )
        print(f"# wrote {path}")
        return 0
    if args.e2e:
        path = plot_e2e(
            args.inp or str(RESULTS_DIR / "e2e.json"), args.out or str(RESULTS_DIR / "e2e.png")
        )
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
        vals = [
            ratios.get(st, {}).get(str(sz), {}).get(op, 0.0) for st in structures for op in PLOT_OPS
        ]
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
