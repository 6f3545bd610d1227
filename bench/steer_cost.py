"""Benchmark: what adaptive routing costs the switches per packet, and spraying the transport (issue 30).

    python bench/steer_cost.py --lab rail4 --runs 3 --out docs/benchmarks.md

The enqueue program (twin/lab/ebpf/queues.bpf.c) runs on every switch port's egress whatever the
fabric balances by; with `load_balance: packet` or `flowlet` it also weighs a reorderable packet's
ECMP members (balance.h: a FIB lookup per member drawn) and may move it, and a moved packet meets
the program again on its new port. BPF_PROG_TEST_RUN cannot show that cost (the lookups need the
switch's routes), so it is measured on real traffic: per fabric a copy of `--lab` is brought up,
the kernel's run-time statistics are turned on for as long as the benchmark holds their file
descriptor (BPF_ENABLE_STATS: no sysctl changed, off again when it exits), and the rail-aligned
naive RoCE ring of bench/multipath.py (DCQCN, one QP per pair; multipath QPs on the adaptive
fabrics) runs `--runs` times. The lab's enqueue programs are those loaded by its bring-up; their
run counts and run time give the mean cost per run (a packet meets it once per switch port it
leaves by, and once more where it was moved). The ranks' CPU is the bench's own meter.
Needs bpftool (`make deps`). Rewrites the "adaptive routing costs" section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from multipath import SIZE, collision_ring, moved  # noqa: E402
from sections import emit  # noqa: E402

from twin.lab import deploy  # noqa: E402
from twin.lab.ebpf.libbpf import enable_run_time_stats  # noqa: E402
from twin.lab.files import open_lab  # noqa: E402
from twin.progress import NullProgress  # noqa: E402

BEGIN, END = "<!-- steer-cost:begin -->", "<!-- steer-cost:end -->"
FABRICS = (("ecmp", False), ("flowlet", True), ("packet", True))
PROGRAM = "enqueue"


def enqueue_stats() -> dict[int, tuple[int, int]]:
    """Program id -> (runs, ns) of every enqueue program loaded now."""
    shown = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    return {p["id"]: (p.get("run_cnt", 0), p.get("run_time_ns", 0)) for p in shown if p.get("name") == PROGRAM}


def bench_fabric(ref: str, mode: str, multipath: bool, runs: int, folder: Path) -> dict:
    path = lab_copy(ref, f"sc{mode[:3]}{ref[-1]}", folder, routing={"load_balance": mode})
    lab_file, fabric = open_lab(str(path))
    elsewhere = set(enqueue_stats())  # other labs' programs, if any run: not counted
    lab = deploy.up(lab_file, fabric, NullProgress(), timeout_s=180)
    try:
        before = {i: s for i, s in enqueue_stats().items() if i not in elsewhere}
        moved_before, lines, cpu = moved(lab), [], []
        for _ in range(runs):
            result = collision_ring(lab, multipath)
            lines.append(result.measurements[0].line_fraction(fabric.rate_bps))
            cpu.append(statistics.mean(result.cpu_busy_pct or [0.0]))
        after, moved_packets = enqueue_stats(), moved(lab) - moved_before
        runs_, ns = (sum(after[i][k] - before[i][k] for i in before) for k in (0, 1))
    finally:
        deploy.down(fabric.name)
    row = {"fabric": mode, "programs": len(before), "runs": runs_, "ns_per_run": ns / runs_ if runs_ else 0.0,
           "moved": moved_packets, "line": statistics.median(lines),
           "cores_busy_pct": statistics.mean(cpu)}
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", default="rail4")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with enable_run_time_stats(), tempfile.TemporaryDirectory(prefix="steer-cost-") as tmp:
        rows = [bench_fabric(args.lab, mode, multipath, args.runs, Path(tmp)) for mode, multipath in FABRICS]
    base = rows[0]["ns_per_run"]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## What adaptive routing costs per packet (issue 30, {now[:10]})", "",
             f"`python bench/steer_cost.py --lab {args.lab} --runs {args.runs}` on {machine()}, {now}. "
             f"A copy of {args.lab} per fabric, the rail-aligned naive RoCE ring (allreduce of {SIZE >> 20} MiB, "
             f"{args.runs} runs of 5 iterations; multipath QPs on the adaptive fabrics). The kernel's own run-time "
             "statistics of the lab's enqueue programs (BPF_ENABLE_STATS while the benchmark runs): runs are "
             "packets leaving a switch port, and a moved packet runs again on its new port.", "",
             "| fabric | programs loaded | runs | packets moved | ns per run | against ecmp | busbw / line (median) | "
             "ranks' cores busy |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |",
             *[f"| {r['fabric']} | {r['programs']} | {r['runs']:,} | {r['moved']:,} | {r['ns_per_run']:.0f} | "
               f"{r['ns_per_run'] - base:+.0f} ns | {r['line']:.2f} | {r['cores_busy_pct']:.0f} % |" for r in rows],
             ""]
    emit(lines, args.out, BEGIN, END)


if __name__ == "__main__":
    main()
