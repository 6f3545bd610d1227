"""Benchmark: adaptive routing against ECMP on the hash-collision case (issue 30).

    python bench/multipath.py --labs rail4 rail8 --runs 5 --out docs/benchmarks.md

The documented collision case: the rail-aligned ring (rail:1) in naive order, so every ring hop
crosses the spines, one QP per rank pair, over RoCE with DCQCN. Each run opens new QPs (new
source ports, new ECMP hashes). Per lab, these fabrics, each a copy of the lab:
  ecmp      routing.load_balance: ecmp, the RC transport (today's twin)
  ecmp-spray load_balance: ecmp, multipath: true: only the NICs spray (16 source ports per QP,
            roce/nic.py) and the switches hash, as Ultra Ethernet's transport over plain ECMP
  flowlet   load_balance: flowlet, the QPs marked reorderable (multipath: true)
  packet    load_balance: packet, multipath: true (selective repeat)
  packet-rc load_balance: packet, multipath: rc (RC QPs whose packets the switches spray: what
            go-back-N does where packets overtake each other)
Per run: busbw against line rate, and over the leaf uplinks that carried the ring (the
interface counters' bytes while it ran) the max/mean ratio (MMR) and Jain's fairness index; per
fabric the coefficient of variation of the runs' step times, the packets the switches moved,
and what the transport did (out-of-order packets, retransmissions, timeouts).
Then, under faults (`--faults`, rail4 only), an allreduce over the same ring as a scenario, on the
ECMP fabric with RC and on the packet fabric with multipath QPs: a 1 % silent drop on a leaf's
uplinks (busbw kept against the same run's healthy steps, what the transport resent), and one
of them down for 4 s (the slowest step against the healthy ones, retransmission timeouts, hangs);
and the same cut under a broadcast whose data crosses it upward only (an uplink failure).
Rewrites the "Adaptive routing" section of the output file.
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

from twin.collectives.bench import run_bench
from twin.lab import deploy
from twin.lab.files import open_lab
from twin.lab.pfc import published as pfc_counters
from twin.lab.ports.counters import CounterReader
from twin.model.balance import uplinks
from twin.progress import NullProgress

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

BEGIN, END = "<!-- multipath:begin -->", "<!-- multipath:end -->"
FABRICS = (("ecmp", "ecmp", False), ("ecmp-spray", "ecmp", True), ("flowlet", "flowlet", True),
           ("packet", "packet", True), ("packet-rc", "packet", "rc"))
TRANSPORTS = {False: "RC", True: "multipath (NIC spraying, selective repeat)",
              "rc": "RC, its packets sprayed (go-back-N)"}
SIZE = 8 * 1024 * 1024
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]
# The drop is on both of leaf-g1-r1's uplinks, so that two of the ring's four hops cross it whatever
# the ECMP hash (on one link, whether an ECMP ring crosses it is the hash's luck); the cut on one.
UPLINKS = ("leaf-g1-r1 -- spine-r1-s1", "leaf-g1-r1 -- spine-r1-s2")
FAULTS = {"1 % silent drop": [{"kind": "silent_drop", "loss_pct": 1, "duration_s": 12, "link": link}
                               for link in UPLINKS],
          "link down 4 s": [{"kind": "link_down", "duration_s": 4, "link": UPLINKS[0]}],
          "uplink down 4 s": [{"kind": "link_down", "duration_s": 4, "link": UPLINKS[0]}]}
RING = {"kind": "allreduce", "ranks": "rail:1", "order": "naive"}
# The ring crosses leaf-g1-r1 both ways, so a cut cable there is a downlink failure for half its
# hops, which waits for routing. A broadcast from host-g1-h1 down a chain into group 2 sends its
# data up through leaf-g1-r1 alone: for its data the cut is an uplink failure, which an adaptive
# leaf steers around at once (its ACKs come down through the spines: for them it is a downlink one).
UPLINK_ONLY = {"kind": "broadcast", "ranks": ["host-g1-h1:nic1", "host-g2-h1:nic1", "host-g2-h2:nic1"],
               "order": "topo"}
JOBS = {"uplink down 4 s": UPLINK_ONLY}


def leaf_uplink_bytes(lab) -> dict[tuple[str, str], int]:
    """Bytes sent so far by every uplink of the leaves of rail 1 (the ring's)."""
    ports = [p for leaf in lab.fabric.by_role("leaf") if leaf.rail == 1 for p in uplinks(lab.fabric, leaf.name)]
    with CounterReader(lab) as reader:
        snap = reader.read(checksums=False)
    return {(p.node, p.ifname): snap.interfaces[(p.node, p.ifname)]["tx_bytes"] for p in ports}


def moved(lab) -> int:
    return sum(c.steered_in for c in pfc_counters.ports(pfc_counters.read(lab.state.directory)).values())


def balance_figures(loads: list[int]) -> tuple[float, float]:
    """(max/mean, Jain's index) over the uplinks the ring could use, idle ones included."""
    if not loads or not any(loads):
        return 0.0, 0.0
    mean = sum(loads) / len(loads)
    return max(loads) / mean, sum(loads) ** 2 / (len(loads) * sum(x * x for x in loads))


def collision_ring(lab, multipath: bool | str):
    """The documented collision case once: rail:1, naive ring, RoCE with DCQCN, one QP per pair."""
    return run_bench(lab, "allreduce", [SIZE], ranks="rail:1", order="naive", iters=5, warmup=1, timeout_s=180,
                     transport="roce", roce={"ib_timeout": 20, "retry_cnt": 7, "qps_per_connection": 1,
                                             "time_scale": 1.0, "multipath": multipath})


def bench_fabric(ref: str, mode: str, multipath: bool, runs: int, folder: Path) -> dict:
    path = lab_copy(ref, f"mp{mode[:3]}{ref[-1]}", folder, routing={"load_balance": mode})
    lab_file, fabric = open_lab(str(path))
    lab = deploy.up(lab_file, fabric, NullProgress(), timeout_s=180)
    out = {"lab": ref, "fabric": mode, "multipath": multipath, "runs": []}
    try:
        for run in range(runs):
            before_bytes, before_moved = leaf_uplink_bytes(lab), moved(lab)
            result = collision_ring(lab, multipath)
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


def under_fault(ref: str, mode: str, multipath: bool, folder: Path) -> list[dict]:
    """Each of FAULTS under a rail-aligned naive-ring RoCE allreduce on a copy of `ref` balancing
    by `mode`: what the run's report says of the collective in the fault's window."""
    name = f"mf{mode[:3]}{ref[-1]}"
    path = lab_copy(ref, name, folder, routing={"load_balance": mode})
    results, rows = folder / "results", []
    try:
        for case, (label, faults) in enumerate(FAULTS.items()):
            scenario = folder / f"{name}-{case}-{faults[0]['kind'].replace('_', '-')}.yaml"
            job = {**JOBS.get(label, RING), "transport": "roce", "size": "8MiB", "timeout_s": 60,
                   "multipath": multipath}
            scenario.write_text(json.dumps({
                "name": scenario.stem, "lab": str(path), "duration_s": 26, "telemetry_ms": 0, "workloads": [job],
                "faults": [{"id": f"fault-{n}", "at_s": 8, **fault} for n, fault in enumerate(faults)]}))
            row = {"fabric": mode, "multipath": multipath, "fault": label,
                   **fault_window(run_scenario(scenario, results), faults[0]["duration_s"])}
            print(f"{ref} {label} on {mode}: {row}", flush=True)
            rows.append(row)
    finally:
        subprocess.run([*TWIN, "lab", "down", name], capture_output=True)
    return rows


def run_scenario(scenario: Path, results: Path) -> Path:
    """`twin run` a scenario file, keeping its lab up for the next; its results folder."""
    before = set(results.glob(f"{scenario.stem}-*"))
    done = subprocess.run([*TWIN, "run", str(scenario), "--keep", "--results", str(results)],
                          capture_output=True, text=True)
    found = sorted(set(results.glob(f"{scenario.stem}-*")) - before)
    if not found:
        raise SystemExit(f"{scenario.stem} wrote no results: {done.stderr.strip()[-500:]}")
    return found[0]


def fault_window(run: Path, duration_s: float,
                 counters=("retrans_packets", "timeouts", "out_of_order", "tail_probes")) -> dict:
    """What a scenario's results folder says of its collective's steps that the first fault
    overlapped, against its healthy ones: busbw kept (the healthy steps' mean time over the hit
    ones'), the slowest step of each, the transport's `counters` summed over the hit steps, hangs."""
    report = json.loads((run / "report.json").read_text())
    onset = report["faults"][0]["applied_s"]
    fault_end = onset + duration_s

    def overlaps(start: float, end: float) -> bool:  # the fault's window, and a second for recovery
        return start < fault_end + 1 and end > onset

    # A `collective` event's t is when the rank began the step (collectives/worker.py).
    steps: dict[tuple, list[float]] = {}  # (gen, iter) -> [first rank's start, last rank's end, slowest step]
    totals = dict.fromkeys(counters, 0)
    for line in (run / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") != "collective" or event.get("iter", 0) < 1:
            continue
        start, end = event["t"], event["t"] + event["step_s"]
        step = steps.setdefault((event["gen"], event["iter"]), [start, end, 0.0])
        step[0], step[1], step[2] = min(step[0], start), max(step[1], end), max(step[2], event["step_s"])
        if overlaps(start, end):
            for counter in totals:
                totals[counter] += event.get(counter, 0)
    healthy = [s for _start, end, s in steps.values() if end < onset]
    hit = [s for start, end, s in steps.values() if overlaps(start, end)]
    collective = next(iter(report["collectives"].values()))
    return {"kept": round(statistics.fmean(healthy) / statistics.fmean(hit), 2) if healthy and hit else None,
            "healthy_max_step_s": round(max(healthy), 3) if healthy else None,
            "fault_max_step_s": round(max(hit), 3) if hit else None, **totals, "hangs": collective["hangs"]}


def render(results: list[dict], command: str, faults: list[dict]) -> list[str]:
    lines = [BEGIN, "## Adaptive routing against ECMP: the hash-collision case (issue 30, "
             f"{datetime.date.today().isoformat()})", "",
             f"`{command}` on {machine()}.", "",
             "rail:1, naive ring (every hop crosses the spines), allreduce of 8 MiB over RoCE with DCQCN, one QP "
             "per rank pair, each run new QPs (new hashes). MMR: max/mean bytes over the uplinks of the ring's "
             "leaves (rail 1), idle ones included; JFI: Jain's index over them; CV: of the runs' step times; "
             "moved: packets the switches moved off the kernel's choice; transport: out-of-order packets, "
             "retransmitted packets, timeouts, summed over runs.", "",
             "| lab | fabric | transport | busbw / line, each run | min | MMR (worst) | JFI (worst) | step CV | "
             "moved | out of order / resent / timeouts | wrong |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        runs = r["runs"]
        steps = [x["step_s"] for x in runs]
        cv = statistics.pstdev(steps) / statistics.mean(steps) if len(steps) > 1 else 0.0
        t = {k: sum(x["transport"].get(k, 0) for x in runs) for k in ("out_of_order", "retrans_packets", "timeouts")}
        each = ", ".join(f"{x['line']:.2f}" for x in runs)
        transport = TRANSPORTS[r["multipath"]]
        lines.append(f"| {r['lab']} | {r['fabric']} | {transport} | {each} | {min(x['line'] for x in runs):.2f} | "
                     f"{max(x['mmr'] for x in runs):.2f} | {min(x['jain'] for x in runs):.3f} | {cv * 100:.1f} % | "
                     f"{sum(x['moved'] for x in runs):,} | {t['out_of_order']:,} / {t['retrans_packets']:,} / "
                     f"{t['timeouts']} | {sum(x['wrong'] for x in runs)} |")
    if faults:
        lines += ["", "Under faults (rail4, the same ring as a scenario, at 8 s): a 1 % silent drop on both of "
                  f"leaf-g1-r1's uplinks ({', '.join(UPLINKS)}; two of the ring's four hops cross one, whatever the "
                  f"hash), or {UPLINKS[0]} down (both ends, so the spine loses its way down to the leaf); the "
                  "uplink case: the same cut under a broadcast from host-g1-h1 down a chain to host-g2-h1 and "
                  "host-g2-h2, whose data crosses the cut link's leaf upward only. Busbw "
                  "kept: the healthy steps' mean time over the mean of the steps the fault overlapped; the slowest of "
                  "those against the slowest healthy one; what the transport did in them.", "",
                  "| fabric | transport | fault | busbw kept | slowest step, healthy / in the fault | resent | "
                  "timeouts | tail probes | out of order | hangs |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for f in faults:
            transport = "multipath (selective repeat)" if f["multipath"] else "RC (go-back-N)"
            lines.append(f"| {f['fabric']} | {transport} | {f['fault']} | {f['kept']} | {f['healthy_max_step_s']} / "
                         f"{f['fault_max_step_s']} s | {f['retrans_packets']} | {f['timeouts']} | {f['tail_probes']} | "
                         f"{f['out_of_order']} | {f['hangs']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="*", default=["rail4", "rail8"])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fabrics", nargs="+", default=[f[0] for f in FABRICS], choices=[f[0] for f in FABRICS])
    parser.add_argument("--faults", action="store_true", help="also the fault runs on rail4")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results, faults = [], []
    with tempfile.TemporaryDirectory() as folder:
        for ref in args.labs:
            for mode, balance, multipath in FABRICS:
                if mode in args.fabrics:
                    results.append(bench_fabric(ref, balance, multipath, args.runs, Path(folder)))
        if args.faults:
            for mode, multipath in (("ecmp", False), ("packet", True)):
                faults += under_fault("rail4", mode, multipath, Path(folder))
    emit(render(results, "python bench/multipath.py " + " ".join(sys.argv[1:]), faults), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
