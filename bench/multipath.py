"""Benchmark: adaptive routing against ECMP on the hash-collision case (issue 30).

    python bench/multipath.py --labs rail4 rail8 --runs 5 --out docs/benchmarks.md

The documented collision case: the rail-aligned ring (rail:1) in naive order, so every ring hop
crosses the spines, one QP per rank pair, over RoCE with DCQCN. Each run opens new QPs (new
source ports, new ECMP hashes). Per lab, three fabrics, each a copy of the lab:
  ecmp      routing.load_balance: ecmp, the RC transport (today's twin)
  flowlet   load_balance: flowlet, the QPs marked reorderable (multipath: true)
  packet    load_balance: packet, multipath: true (selective repeat)
Per run: busbw against line rate, and over the leaf uplinks that carried the ring (the
interface counters' bytes while it ran) the max/mean ratio (MMR) and Jain's fairness index; per
fabric the coefficient of variation of the runs' step times, the packets the switches moved,
and what the transport did (out-of-order packets, retransmissions, timeouts).
Rewrites the "Adaptive routing" section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
from pathlib import Path

from twin.collectives.bench import run_bench
from twin.lab import deploy
from twin.lab.counters import CounterReader
from twin.lab.files import open_lab
from twin.lab.pfc import counters as pfc_counters
from twin.model.balance import uplinks
from twin.progress import NullProgress

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

BEGIN, END = "<!-- multipath:begin -->", "<!-- multipath:end -->"
FABRICS = (("ecmp", "ecmp", False), ("flowlet", "flowlet", True), ("packet", "packet", True))
SIZE = 8 * 1024 * 1024


def leaf_uplink_bytes(lab) -> dict[tuple[str, str], int]:
    ports = [p for leaf in lab.fabric.by_role("leaf") for p in uplinks(lab.fabric, leaf.name)]
    with CounterReader(lab) as reader:
        snap = reader.read(checksums=False)
    return {(p.node, p.ifname): snap.interfaces[(p.node, p.ifname)]["tx_bytes"] for p in ports}


def moved(lab) -> int:
    return sum(c.steered_in for c in pfc_counters.ports(pfc_counters.read(lab.state.directory)).values())


def balance_figures(loads: list[int]) -> tuple[float, float]:
    """(max/mean, Jain's index) over the uplinks that carried traffic."""
    used = [x for x in loads if x > 0]
    if not used:
        return 0.0, 0.0
    mean = sum(used) / len(used)
    return max(used) / mean, sum(used) ** 2 / (len(used) * sum(x * x for x in used))


def bench_fabric(ref: str, mode: str, multipath: bool, runs: int, folder: Path) -> dict:
    name = f"mp{mode[:3]}{ref[-1]}"
    path = lab_copy(ref, name, folder)
    text = path.read_text()
    path.write_text(text.replace("routing:\n", f"routing:\n  load_balance: {mode}\n", 1))
    lab_file, fabric = open_lab(str(path))
    lab = deploy.up(lab_file, fabric, NullProgress(), timeout_s=180)
    out = {"lab": ref, "fabric": mode, "multipath": multipath, "runs": []}
    try:
        for run in range(runs):
            before_bytes, before_moved = leaf_uplink_bytes(lab), moved(lab)
            result = run_bench(lab, "allreduce", [SIZE], ranks="rail:1", order="naive", iters=5, warmup=1,
                               timeout_s=180, transport="roce",
                               roce={"ib_timeout": 20, "retry_cnt": 7, "qps_per_connection": 1, "time_scale": 1.0,
                                     "multipath": multipath})
            after = leaf_uplink_bytes(lab)
            (m,) = result.measurements
            mmr, jain = balance_figures([after[k] - before_bytes[k] for k in after])
            row = {"line": round(m.line_fraction(fabric.rate_bps), 3), "step_s": m.time_s, "mmr": round(mmr, 2),
                   "jain": round(jain, 3), "moved": moved(lab) - before_moved, "wrong": m.wrong,
                   "transport": m.transport, "cpu": result.cpu_busy_pct}
            print(f"{ref} {mode} run {run}: {row}", flush=True)
            out["runs"].append(row)
    finally:
        deploy.down(fabric.name)
    return out


def render(results: list[dict], command: str) -> list[str]:
    lines = [BEGIN, "## Adaptive routing against ECMP: the hash-collision case (issue 30, "
             f"{datetime.date.today().isoformat()})", "",
             f"`{command}` on {machine()}.", "",
             "rail:1, naive ring (every hop crosses the spines), allreduce of 8 MiB over RoCE with DCQCN, one QP "
             "per rank pair, each run new QPs (new hashes). MMR: max/mean bytes over the leaf uplinks that "
             "carried the ring; JFI: Jain's index over them; CV: of the runs' step times; moved: packets the "
             "switches moved off the kernel's choice; transport: out-of-order packets, retransmitted packets, "
             "timeouts, summed over runs.", "",
             "| lab | fabric | transport | busbw / line, each run | min | MMR (worst) | JFI (worst) | step CV | "
             "moved | out of order / resent / timeouts | wrong |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        runs = r["runs"]
        steps = [x["step_s"] for x in runs]
        cv = statistics.pstdev(steps) / statistics.mean(steps) if len(steps) > 1 else 0.0
        t = {k: sum(x["transport"].get(k, 0) for x in runs) for k in ("out_of_order", "retrans_packets", "timeouts")}
        each = ", ".join(f"{x['line']:.2f}" for x in runs)
        transport = "multipath (selective repeat)" if r["multipath"] else "RC"
        lines.append(f"| {r['lab']} | {r['fabric']} | {transport} | {each} | {min(x['line'] for x in runs):.2f} | "
                     f"{max(x['mmr'] for x in runs):.2f} | {min(x['jain'] for x in runs):.3f} | {cv * 100:.1f} % | "
                     f"{sum(x['moved'] for x in runs):,} | {t['out_of_order']:,} / {t['retrans_packets']:,} / "
                     f"{t['timeouts']} | {sum(x['wrong'] for x in runs)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="+", default=["rail4", "rail8"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fabrics", nargs="+", default=[f[0] for f in FABRICS], choices=[f[0] for f in FABRICS])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for ref in args.labs:
            for mode, balance, multipath in FABRICS:
                if mode in args.fabrics:
                    results.append(bench_fabric(ref, balance, multipath, args.runs, Path(folder)))
    emit(render(results, "python bench/multipath.py " + " ".join(sys.argv[1:])), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
