"""Benchmark: gloo collectives, the probe mesh and telemetry on healthy labs.

    python bench/workloads.py --labs rail4 rail8 --out docs/benchmarks.md

Per lab: allreduce busbw as a fraction of line rate for a rail-aligned group and for every
NIC (cross-rail), per-core CPU while the ranks ran (to show whether the CPU, not the fabric,
was the limit); naive vs topology-aware ring order with the bytes that entered the spine and
superspine tiers; 1 vs 4 connections per rank pair; the probe mesh's configured vs achieved
rate and its CPU cost; the telemetry sampler's achieved period. Rewrites the "Workloads"
section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

from twin.collectives.bench import run_bench
from twin.collectives.metrics import human_size, size_sweep
from twin.lab import deploy
from twin.lab.files import open_lab
from twin.probes.run import run_probe_mesh
from twin.progress import NullProgress
from twin.telemetry.sampler import Sampler

sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN, END = "<!-- workloads:begin -->", "<!-- workloads:end -->"
CPU_BOUND_PCT = 90.0
PROBE_INTERVAL_MS = {"rail4": 100, "rail8": 200}  # rail8's cover mesh at 100 ms is over max_pps


CHANNEL_REPEATS = 3  # each run draws new ephemeral ports, so new ECMP hashes


def bench_lab(ref: str, sizes: str, quick: bool) -> dict:
    lab_file, fabric = open_lab(ref)
    lab = deploy.up(lab_file, fabric, NullProgress(), timeout_s=120)
    out: dict = {"lab": fabric.name, "rate_bps": fabric.rate_bps, "sweeps": [], "orders": [], "channels": []}
    try:
        def bench(table, label, **kwargs):
            result = run_bench(lab, "allreduce", iters=2 if quick else 5, warmup=2, **kwargs)
            print(f"{fabric.name} {label}: " + ", ".join(
                f"{human_size(m.size)} {m.line_fraction(fabric.rate_bps):.2f}" for m in result.measurements)
                + f"; spine {result.spine_bytes / 1e6:.0f} MB, superspine {result.superspine_bytes / 1e6:.0f} MB,"
                f" CPU {result.cpu_busy_pct}", flush=True)
            out[table].append((label, result))

        big = size_sweep(sizes)
        bench("sweeps", "rail-aligned (rail:1), topo ring", sizes=big, ranks="rail:1", order="topo")
        bench("sweeps", "every NIC (cross-rail), topo ring", sizes=big[:2], ranks="all", order="topo")
        for ranks in ("rail:1", "all"):
            for order in ("topo", "naive"):
                bench("orders", f"{ranks}, {order} ring", sizes=big[:1], ranks=ranks, order=order)
        for channels in (1, 4):
            for _ in range(1 if quick else CHANNEL_REPEATS):
                bench("channels", f"rail:1, naive ring, {channels} connection(s)/pair", sizes=big[:1],
                      ranks="rail:1", order="naive", channels=channels)
        interval = PROBE_INTERVAL_MS.get(fabric.name, 200)
        out["probes"] = run_probe_mesh(lab, duration_s=5 if quick else 15, interval_ms=interval)
        out["probes"]["interval_ms"] = interval
        print(f"{fabric.name} probes: {out['probes']['load']} achieved {out['probes']['achieved_pps']}", flush=True)
        sampler = Sampler(lab, 100)
        sampler.start()
        time.sleep(5 if quick else 15)
        out["telemetry"] = sampler.stop()
        print(f"{fabric.name} telemetry: {out['telemetry']}", flush=True)
    finally:
        deploy.down(fabric.name)
    return out


def _cpu(result) -> str:
    busy = result.cpu_busy_pct
    flag = " (CPU-bound)" if busy and max(busy) >= CPU_BOUND_PCT else ""
    return "/".join(f"{p:.0f}" for p in busy) + " %" + flag


def render(labs: list[dict], command: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, "## Workloads: collectives, probes, telemetry (issue 4)", "",
             f"Measured {now} on {machine()}.", f"Command: `{command}`. Labs at their shipped line rate "
             "(200 Mbit/s per link, the stand-in for 400G); gloo allreduce, one rank per host NIC, results "
             "checked every iteration (no wrong element in any run). busbw is nccl-tests' (allreduce factor "
             "2(n-1)/n); \"line\" is busbw / line rate. CPU is per core, from every rank connected to the last "
             f"result; marked CPU-bound at {CPU_BOUND_PCT:.0f} % or more (then the figure says more about two "
             "cores than about the fabric).", "",
             "### busbw against line rate", "",
             "| lab | ranks, ring (n) | size | busbw MB/s | line | CPU busy |", "| --- | --- | --- | --- | --- | --- |"]
    for lab in labs:
        for label, result in lab["sweeps"]:
            for m in result.measurements:
                lines.append(f"| {lab['lab']} | {label} ({len(result.ranks)}) | {human_size(m.size)} | "
                             f"{m.busbw / 1e6:.1f} | {m.line_fraction(lab['rate_bps']):.2f} | {_cpu(result)} |")
    lines += ["",
              "### Ring order: naive (round-robin over leaves; host-major for all NICs) vs topology-aware "
              "(NICs under one leaf adjacent)", "",
              "Bytes that entered the spine and superspine tiers during the run (interface counters; warm-up "
              "and barrier traffic included). The topology-aware ring halves the spine bytes and its few "
              "spine-crossing hops leave from different leaves toward different leaves, so they never share "
              "an uplink; the naive ring's hops share leaf uplinks whenever two of them hash onto the same "
              "spine, which halves the busbw on some runs and not others (one run per row here; the next "
              "table repeats one case).", "",
              "| lab | ranks, ring | size | ring hops crossing spines | busbw MB/s | line | spine MB | superspine MB "
              "| CPU busy |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for lab in labs:
        for label, result in lab["orders"]:
            m = result.measurements[0]
            lines.append(f"| {lab['lab']} | {label} | {human_size(m.size)} | {result.ring_hops_crossing_spines}/"
                         f"{len(result.ranks)} | {m.busbw / 1e6:.1f} | {m.line_fraction(lab['rate_bps']):.2f} | "
                         f"{result.spine_bytes / 1e6:.0f} | {result.superspine_bytes / 1e6:.0f} | {_cpu(result)} |")
    lines += ["", "### Connections per rank pair (ECMP hash collisions)", "",
              "rail:1 with the naive ring: every ring hop crosses the spines, so two hops hashed onto one "
              "leaf uplink share it. Each run draws new source ports, so new hashes.", "",
              "| lab | connections per pair | size | line, each run | median |", "| --- | --- | --- | --- | --- |"]
    for lab in labs:
        by_label: dict[str, list] = {}
        for label, result in lab["channels"]:
            by_label.setdefault(label, []).append(result.measurements[0])
        for label, ms in by_label.items():
            fractions = [m.line_fraction(lab["rate_bps"]) for m in ms]
            lines.append(f"| {lab['lab']} | {label.split(', ')[-1]} | {human_size(ms[0].size)} | "
                         f"{', '.join(f'{f:.2f}' for f in fractions)} | {statistics.median(fractions):.2f} |")
    lines += ["", "### Probe mesh and telemetry", "",
              "Probe mesh with `cover` pairs (same-rail pairs and one cross-rail pair per NIC, one source port "
              "per discovered path); telemetry sampler on every node every 100 ms.", "",
              "| lab | paths | interval | configured probes/s | achieved probes/s | agents' CPU (core-s per s) "
              "| per 1000 probes/s | links not covered | telemetry period achieved (mean / max) | one read |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for lab in labs:
        p, t = lab["probes"], lab["telemetry"]
        lifetime = p["probing_s"] + 3.0  # discovery before, grace after: the agents ran about this long
        per_s = p["cpu_s"] / lifetime
        per_k = per_s / (p["achieved_pps"] / 1000) if p["achieved_pps"] else 0.0
        lines.append(f"| {lab['lab']} | {p['paths']} | {p['interval_ms']} ms | {p['load']['probes_per_s']:.0f} | "
                     f"{p['achieved_pps']:.0f} | {per_s:.2f} | {per_k:.2f} | {len(p['uncovered'])} | "
                     f"{t['achieved_mean_ms']} / {t['achieved_max_ms']} ms | {t['read_mean_ms']} ms |")
    lines += ["", "Agents' CPU includes the kernel's forwarding of their probes and echoes through every hop "
              "(veth delivery runs in the sender's context), not only Python.", END]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="+", default=["rail4", "rail8"])
    parser.add_argument("--sizes", default="8MiB:32MiB", help="allreduce sizes of the rail-aligned sweep")
    parser.add_argument("--quick", action="store_true", help="fewer iterations and shorter probe runs")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args()
    labs = [bench_lab(lab, args.sizes, args.quick) for lab in args.labs]
    write_section(args.out, BEGIN, END, render(labs, "python " + " ".join(sys.argv)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
