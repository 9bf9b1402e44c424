"""Prints the benchmark JSON results as markdown tables (used to fill README.md).

    python -m benchmarks.report [--structures benchmarks/results/structures.json]
                                [--table benchmarks/results/table.json]
                                [--e2e benchmarks/results/e2e.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from benchmarks._common import RESULTS_DIR, fmt_rate

SOPS = ("insert", "update", "update_many", "sample", "delete")


def _size(size: str) -> str:
    n = int(size)
    e = len(str(n)) - 1
    return f"10^{e}" if n == 10**e else f"{n:,}"


def _machine(m: dict) -> str:
    return (
        f"{m.get('cpu_model')} ({m.get('cpu_count')} cores), {m.get('platform')}, "
        f"Python {m.get('python')}, numpy {m.get('numpy')}, Cython {m.get('cython')}, "
        f"{m.get('date_utc')}, load avg at start {m.get('loadavg_at_start')}"
    )


def structures_md(data: dict) -> str:
    lines = [f"Machine: {_machine(data['machine'])}; package IMPLEMENTATION="
             f"`{data['implementation']}`.", ""]
    lines.append("| structure | size | impl | " + " | ".join(SOPS) + " |")
    lines.append("|---|---:|---|" + "---:|" * len(SOPS))
    for st, by_size in data["results"].items():
        for size, cell in by_size.items():
            for impl in ("pure", "compiled"):
                if not cell.get(impl):
                    continue
                ops = cell[impl]["ops"]
                lines.append(f"| {st} | {_size(size)} | {impl} | "
                             + " | ".join(fmt_rate(ops[o]["ops_per_s"]) for o in SOPS) + " |")
            r = data["ratios_compiled_over_pure"].get(st, {}).get(size)
            if r:
                lines.append(f"| {st} | {_size(size)} | **ratio** | "
                             + " | ".join(f"**{r[o]:.1f}x**" for o in SOPS) + " |")
    return "\n".join(lines)


def table_md(data: dict) -> str:
    c, p = data["compiled"], data["pure"]
    lines = [f"Machine: {_machine(data['machine'])}; subprocess implementations: "
             f"`{c['implementation']}` / `{p['implementation']}`.", ""]
    lines.append("| sampler | metric | unit | compiled | pure | ratio | target (compiled) |")
    lines.append("|---|---|---|---:|---:|---:|---|")
    for sampler, res in c["results"].items():
        for m, v in res.items():
            t = data["targets"][sampler][m]
            lines.append(
                f"| {sampler} | {m} | {v['unit']} | {fmt_rate(v['rate'])} | "
                f"{fmt_rate(p['results'][sampler][m]['rate'])} | "
                f"{data['ratios_compiled_over_pure'][sampler][m]:.1f}x | "
                f"≥ {fmt_rate(t['target'])}: {'met' if t['met'] else '**missed**'} |"
            )
    for w in data.get("warnings", []):
        lines.append(f"\nWARNING: {w}")
    return "\n".join(lines)


E2E_LABELS = {
    "insert_small": "TrajectoryWriter, small steps, length-1 items",
    "insert_frames": "TrajectoryWriter, uint8[84,84,4] frames, length-1 items",
    "insert_seq": "TrajectoryWriter, length-10 overlapping items (1 new step/item)",
    "sample_uniform": "client.sample, 100k small items, Uniform",
    "sample_prioritized": "client.sample, 100k small items, Prioritized(0.8)",
    "sample_frames": "client.sample, 10k frame items, Uniform",
    "mutate": "mutate_priorities, 1,000 keys per call",
}


def _rate1(value: float) -> str:
    """Like ``fmt_rate`` with one decimal below 100k: 13.5k, 425k, 1.50M."""
    if 1e3 <= value < 1e5:
        return f"{value / 1e3:.1f}k"
    return fmt_rate(value)


def _ref(values: dict, name: str) -> str:
    ref = values.get(name)
    if not ref:
        return "—"
    parts = [f"{v:.0f} MB/s" if k.startswith("mb") else f"{_rate1(v)} {k.split('_per_')[0]}/s"
             for k, v in ref.items()]
    return ", ".join(parts)


def _mib(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.0f} MiB"


def e2e_md(data: dict) -> str:
    res = data["results"]
    n_small = data["config"]["small_items"]
    n_frames = data["config"]["frame_items"]
    labels = {k: v.replace("100k", f"{n_small:,}").replace("10k", f"{n_frames:,}")
              for k, v in E2E_LABELS.items()}
    ref = data["reverb_reference"]["values"]
    lines = [f"Machine: {_machine(data['machine'])}; packages {data['machine'].get('packages')}; "
             f"IMPLEMENTATION client `{data['implementation']}`, server "
             f"`{data['server_implementation']}`.", ""]
    lines.append("| workload | reverb_py (measured) | MB/s | CPU/wall client (main + loop) "
                 "| CPU/wall server | Reverb reference (not measured here) |")
    lines.append("|---|---:|---:|---|---:|---|")
    for name, r in res.items():
        mb = f"{r['mb_per_s']:.1f}" if "mb_per_s" in r else "—"
        th = r.get("client_threads_cpu_per_wall_s", {})
        srv = r.get("server_cpu_per_wall_s")
        lines.append(
            f"| {labels.get(name, name)} | {_rate1(r['rate'])} {r['unit']} | {mb} | "
            f"{r['client_cpu_per_wall_s']:.2f} ({th.get('main', 0):.2f} + "
            f"{th.get('client_loop', 0):.2f}) | {'n/a' if srv is None else f'{srv:.2f}'} | "
            f"{_ref(ref, name)} |"
        )
    lines.append("")
    ms, mf = data["memory"]["small"], data["memory"]["frames"]

    def per_item(after: dict, before: dict, n: int) -> str:
        a, b = after.get("rss_kib"), before.get("rss_kib")
        return "n/a" if a is None or b is None else f"{(a - b) * 1024 / n:,.0f} B/item"

    lines.append("| server process | RSS | growth per item |")
    lines.append("|---|---:|---:|")
    lines.append(f"| small-step server, empty (4 tables) | {_mib(ms['baseline']['rss_kib'])} | |")
    lines.append(f"| + {n_small:,} small items (Uniform table) | "
                 f"{_mib(ms['after_small_uniform']['rss_kib'])} | "
                 f"{per_item(ms['after_small_uniform'], ms['baseline'], n_small)} |")
    both = ms["after_small_uniform_and_prioritized"]
    lines.append(f"| + {n_small:,} small items (Prioritized table) | {_mib(both['rss_kib'])} | "
                 f"{per_item(both, ms['after_small_uniform'], n_small)} |")
    lines.append(f"| frame server, empty | {_mib(mf['baseline']['rss_kib'])} | |")
    lines.append(f"| + {n_frames:,} frame items | {_mib(mf['after_frames']['rss_kib'])} | "
                 f"{per_item(mf['after_frames'], mf['baseline'], n_frames)} |")
    ratio = data["fills"].get("frame_snappy_ratio")
    if ratio:
        lines.append(f"\nFrames compress to {ratio:.1%} of their size with snappy (the chunk "
                     "codec).")
    lines.append(f"\n{data['reverb_reference']['note']}.")
    for w in data.get("warnings", []):
        lines.append(f"\nWARNING: {w}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", default=str(RESULTS_DIR / "structures.json"))
    parser.add_argument("--table", default=str(RESULTS_DIR / "table.json"))
    parser.add_argument("--e2e", default=str(RESULTS_DIR / "e2e.json"))
    args = parser.parse_args(argv)
    for path, fn in ((args.structures, structures_md), (args.table, table_md),
                     (args.e2e, e2e_md)):
        p = pathlib.Path(path)
        if p.exists():
            print(f"### {p.name}\n")
            print(fn(json.loads(p.read_text(encoding="utf-8"))))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
