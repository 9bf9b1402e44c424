"""Prints the benchmark JSON results as markdown tables (used to fill README.md).

python -m benchmarks.report [--structures benchmarks/results/structures.json]
                            [--table benchmarks/results/table.json]
                            [--e2e benchmarks/results/e2e.json]
                            [--checkpoint benchmarks/results/checkpoint.json]
                            [--compare benchmarks/results/compare.json]
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
    lines = [
        f"Machine: {_machine(data['machine'])}; package IMPLEMENTATION=`{data['implementation']}`.",
        "",
    ]
    lines.append("| structure | size | impl | " + " | ".join(SOPS) + " |")
    lines.append("|---|---:|---|" + "---:|" * len(SOPS))
    for st, by_size in data["results"].items():
        for size, cell in by_size.items():
            for impl in ("pure", "compiled"):
                if not cell.get(impl):
                    continue
                ops = cell[impl]["ops"]
                lines.append(
                    f"| {st} | {_size(size)} | {impl} | "
                    + " | ".join(fmt_rate(ops[o]["ops_per_s"]) for o in SOPS)
                    + " |"
                )
            r = data["ratios_compiled_over_pure"].get(st, {}).get(size)
            if r:
                lines.append(
                    f"| {st} | {_size(size)} | **ratio** | "
                    + " | ".join(f"**{r[o]:.1f}x**" for o in SOPS)
                    + " |"
                )
    return "\n".join(lines)


def table_md(data: dict) -> str:
    c, p = data["compiled"], data["pure"]
    lines = [
        f"Machine: {_machine(data['machine'])}; subprocess implementations: "
        f"`{c['implementation']}` / `{p['implementation']}`.",
        "",
    ]
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
    parts = [
        f"{v:.0f} MB/s" if k.startswith("mb") else f"{_rate1(v)} {k.split('_per_')[0]}/s"
        for k, v in ref.items()
    ]
    return ", ".join(parts)


def _mib(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.0f} MiB"


def e2e_md(data: dict) -> str:
    res = data["results"]
    n_small = data["config"]["small_items"]
    n_frames = data["config"]["frame_items"]
    labels = {
        k: v.replace("100k", f"{n_small:,}").replace("10k", f"{n_frames:,}")
        for k, v in E2E_LABELS.items()
    }
    ref = data["reverb_reference"]["values"]
    lines = [
        f"Machine: {_machine(data['machine'])}; packages {data['machine'].get('packages')}; "
        f"IMPLEMENTATION client `{data['implementation']}`, server "
        f"`{data['server_implementation']}`.",
        "",
    ]
    lines.append(
        "| workload | reverb_py (measured) | MB/s | CPU/wall client (main + loop) "
        "| CPU/wall server | Reverb reference (not measured here) |"
    )
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
    lines.append(
        f"| + {n_small:,} small items (Uniform table) | "
        f"{_mib(ms['after_small_uniform']['rss_kib'])} | "
        f"{per_item(ms['after_small_uniform'], ms['baseline'], n_small)} |"
    )
    both = ms["after_small_uniform_and_prioritized"]
    lines.append(
        f"| + {n_small:,} small items (Prioritized table) | {_mib(both['rss_kib'])} | "
        f"{per_item(both, ms['after_small_uniform'], n_small)} |"
    )
    lines.append(f"| frame server, empty | {_mib(mf['baseline']['rss_kib'])} | |")
    lines.append(
        f"| + {n_frames:,} frame items | {_mib(mf['after_frames']['rss_kib'])} | "
        f"{per_item(mf['after_frames'], mf['baseline'], n_frames)} |"
    )
    ratio = data["fills"].get("frame_snappy_ratio")
    if ratio:
        lines.append(
            f"\nFrames compress to {ratio:.1%} of their size with snappy (the chunk codec)."
        )
    lines.append(f"\n{data['reverb_reference']['note']}.")
    for w in data.get("warnings", []):
        lines.append(f"\nWARNING: {w}")
    return "\n".join(lines)


CHECKPOINT_LABELS = {
    "small": "{n:,} small items (44 B steps)",
    "frames": "{n:,} uint8[84,84,4] frames, compressible (as e2e)",
    "frames_random": "{n:,} uint8[84,84,4] frames, random",
}


def _mb(n: int | float) -> str:
    return f"{n / 1e6:.1f} MB"


def checkpoint_md(data: dict) -> str:
    res = data["results"]
    ref = data["reverb_reference"]["values"]
    lines = [
        f"Machine: {_machine(data['machine'])}; packages {data['machine'].get('packages')}; "
        f"checkpoints on `{data['machine'].get('checkpoint_fs')}`; IMPLEMENTATION client "
        f"`{data['implementation']}`, server `{data['server_implementation']}`.",
        "",
    ]
    lines.append(
        "| workload | save | restore (new process → full `server_info`) | of which "
        "in-process `load_latest` + `Table.restore` | checkpoint on disk | server RSS "
        "before → peak during save | Reverb reference save / restore (not measured "
        "here) |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---|")
    for name, r in res.items():
        label = CHECKPOINT_LABELS.get(name, name).format(n=r["items"])
        s, rs, ip = r["save"], r["restore"], r["restore_in_process"]
        m, size = r["memory_during_save"], r["checkpoint_size"]
        rf = ref.get(name)
        rtext = f"{rf['save_s']:.1f} s / {rf['restore_s']:.1f} s" if rf else "—"
        lines.append(
            f"| {label} | {s['seconds']:.2f} s | {rs['seconds']:.2f} s | "
            f"{ip['load_latest_s']:.2f} + {ip['table_restore_s']:.2f} s | "
            f"{_mb(size['bytes'])} ({size['bytes_per_item']:,.0f} B/item) | "
            f"{_mib(m['rss_before_kib'])} → {_mib(m['rss_peak_kib'])} | {rtext} |"
        )
    lines.append("")
    lines.append(
        "| workload | restore phases: spawn + imports | import reverb_py | `Server()` "
        "(its `load_latest`) | first `server_info` | server RSS after restore |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|")
    for name, r in res.items():
        ph = r["restore"]["phases"]
        lines.append(
            f"| {name} | {ph['spawn_and_imports_s']:.2f} s | {ph['import_reverb_s']:.2f} s | "
            f"{ph['server_ctor_s']:.2f} s ({ph['ctor_load_latest_s']:.2f} s) | "
            f"{ph['first_server_info_s']:.3f} s | {_mib(r['restore']['rss_after_restore_kib'])} |"
        )
    base = data.get("baseline_start_empty")
    if base:
        lines.append(
            f"\nA server process with an empty checkpoint directory answers "
            f"`server_info` {base['seconds']:.2f} s after `Process.start()`."
        )
    lines.append(f"\n{data['reverb_reference']['note']}.")
    for w in data.get("warnings", []):
        lines.append(f"\nWARNING: {w}")
    return "\n".join(lines)


COMPARE_SYSTEMS = ("reverb_py", "dm_reverb")


def _cmp_value(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "B/item":
        return f"{value:,.0f} B"
    if unit in ("ms", "CPU s/10k"):
        return f"{value:.3f}"
    return _rate1(value)


def _verdict(target: dict) -> str:
    m = target["margin"]
    if target["met"]:
        return f"met (+{(m - 1) * 100:.0f} %)"
    return f"**missed** ({m * 100:.0f} % of target)"


def compare_md(data: dict) -> str:
    """``compare.json`` (``benchmarks.compare``): one row per workload, reverb_py vs
    dm-reverb, ratio (> 1: reverb_py better) and target verdict with its margin."""
    res = data["results"]
    systems = data["systems"]

    def versions(s: str) -> str:
        v = systems[s].get("versions") or {}
        keys = (
            ("reverb_py", "grpcio", "protobuf", "cramjam", "uvloop", "numpy")
            if s == "reverb_py"
            else ("dm-reverb", "tensorflow", "numpy", "protobuf")
        )
        return ", ".join(f"{k} {v.get(k)}" for k in keys if v.get(k))

    cfg = data["config"]
    lines = [
        f"Machine: {_machine(data['machine'])}.",
        f"reverb_py: Python {systems['reverb_py']['versions']['python']}, "
        f"{versions('reverb_py')}; server IMPLEMENTATION "
        f"`{systems['reverb_py'].get('server_implementation')}`. dm-reverb: Python "
        f"{systems['dm_reverb']['versions']['python']}, {versions('dm_reverb')}.",
        f"{cfg['repeats']} repetitions per workload, the two systems alternating; medians. "
        f"{data['ratio_convention']}",
        "",
        "| workload | unit | reverb_py | dm-reverb | ratio | target | verdict (margin) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name, r in res.items():
        unit, t = r["unit"], r["target"]
        if t is None:
            lines.append(
                f"| {r['label']} | {unit} | {_cmp_value(r['reverb_py']['value'], unit)} | "
                f"{_cmp_value(r['dm_reverb']['value'], unit)} | **{r['ratio']:.2f}** | – | "
                "no target |"
            )
            continue
        lines.append(
            f"| {r['label']} | {unit} | {_cmp_value(r['reverb_py']['value'], unit)} | "
            f"{_cmp_value(r['dm_reverb']['value'], unit)} | **{r['ratio']:.2f}** | "
            f"≥ {t['min_ratio']:g} | {_verdict(t)}"
            + (
                " on the lower of its two ratios (items, samples) |"
                if "ratio_samples" in r
                else " |"
            )
        )
        if "ratio_samples" in r:
            label = r["label"].replace("items inserted", "samples")
            lines.append(
                f"| {label} | samples/s | {_rate1(r['reverb_py']['samples_per_s'])} | "
                f"{_rate1(r['dm_reverb']['samples_per_s'])} | **{r['ratio_samples']:.2f}** | "
                f"≥ {t['min_ratio']:g} | (row above) |"
            )
    restore = [(n, r) for n, r in res.items() if n.startswith("checkpoint_restore")]
    if restore:
        lines += ["", "| restart (median) | reverb_py | dm-reverb |", "|---|---:|---:|"]
        for n, r in restore:
            py, dm = r["reverb_py"], r["dm_reverb"]
            lines.append(
                f"| {r['label']}: process start until full `server_info` | "
                f"{py['value']:.2f} s | {dm['value']:.2f} s |"
            )
            lines.append(
                f"| … of which interpreter start + `import` | "
                f"{py['spawn_and_imports_s']:.2f} s | {dm['spawn_and_imports_s']:.2f} s |"
            )
            lines.append(
                f"| … of which `Server(tables, checkpointer=…)` (loads it) "
                f"| {py['server_ctor_s']:.2f} s | {dm['server_ctor_s']:.2f} s |"
            )
    mem = [(n, r) for n, r in res.items() if n.startswith("memory")]
    if mem:
        lines += ["", "| server RSS growth per item | reverb_py | dm-reverb |", "|---|---:|---:|"]
        for n, r in mem:
            py, dm = r["reverb_py"], r["dm_reverb"]
            lines.append(
                f"| {r['label']}, one-table server | {py['value']:,.0f} B | {dm['value']:,.0f} B |"
            )
            n_main = py.get("main_server_items")
            items = f"{n_main:,} items, " if n_main else ""
            lines.append(
                f"| same, main server, Uniform table ({items}filled first) | "
                f"{py['main_server_bytes_per_item']:,.0f} B | "
                f"{dm['main_server_bytes_per_item']:,.0f} B |"
            )
            lines.append(
                f"| same, main server, Prioritized table ({items}filled next) | "
                f"{py['main_server_prioritized_bytes_per_item']:,.0f} B | "
                f"{dm['main_server_prioritized_bytes_per_item']:,.0f} B |"
            )
    targeted = [r for r in res.values() if r["target"] is not None]
    met = sum(1 for r in targeted if r["target"]["met"])
    lines.append(f"\nTargets met: {met} of {len(targeted)}.")
    for w in data.get("warnings", []):
        lines.append(f"\nWARNING: {w}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", default=str(RESULTS_DIR / "structures.json"))
    parser.add_argument("--table", default=str(RESULTS_DIR / "table.json"))
    parser.add_argument("--e2e", default=str(RESULTS_DIR / "e2e.json"))
    parser.add_argument("--checkpoint", default=str(RESULTS_DIR / "checkpoint.json"))
    parser.add_argument("--compare", default=str(RESULTS_DIR / "compare.json"))
    args = parser.parse_args(argv)
    for path, fn in (
        (args.structures, structures_md),
        (args.table, table_md),
        (args.e2e, e2e_md),
        (args.checkpoint, checkpoint_md),
        (args.compare, compare_md),
    ):
        p = pathlib.Path(path)
        if p.exists():
            print(f"### {p.name}\n")
            print(fn(json.loads(p.read_text(encoding="utf-8"))))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
