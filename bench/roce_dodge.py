"""Benchmark: a RoCE job's QPs dodging by path offset (`dodge: offset`, issue 30) against the same
job without, under the faults dodging is for.

    python bench/roce_dodge.py --runs 3 --out docs/benchmarks.md

On a copy of rail4-ar (the switches hash with the source port's offset: routing.hash_offset), a
rail-aligned naive-ring allreduce of 8 MiB over RoCE RC QPs (go-back-N, NCCL's timers, DCQCN)
with two QPs per rank pair (NCCL_IB_QPS_PER_CONNECTION 2) as a scenario; a fault comes at 8 s for 12 s:
  1 % silent drop   on leaf-g1-r1 -- spine-r1-s1, both ways
  10 % silent drop  on spine-r1-s1 -- leaf-g2-r1, both ways
  black hole        spine-r1-s1 discards what it forwards toward host-g2-h2 (a FIB entry gone bad)
Every hop of the naive ring goes from one leaf to the other over spine-r1-s1 or spine-r1-s2, as its
QP's hash says, so each of the 8 QPs crosses a silent drop with probability 1/2 (all miss it once
in 256 runs), and the black hole, which only what goes to host-g2-h2 meets (one hop's data, another
hop's ACKs: 4 QPs), once in 16; a run none of whose QPs met the fault resends nothing and moves
nothing, and the table counts those runs.
Per run: busbw kept (the healthy steps' mean time over the mean of those the fault overlapped),
the slowest step healthy and in the fault, what the transport did in those steps (NAKs, packets
resent, timeouts, moves) and hangs. Each run opens new QPs: new source ports, new paths.
Rewrites the "Dodging per QP" section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from multipath import TWIN, fault_window, run_scenario  # noqa: E402
from sections import emit  # noqa: E402

BEGIN, END = "<!-- roce-dodge:begin -->", "<!-- roce-dodge:end -->"
LAB, NAME = "rail4-ar", "rdodge4"
FAULT_AT_S, FAULT_S = 8, 12
FAULTS = {"1 % silent drop": {"kind": "silent_drop", "link": "leaf-g1-r1 -- spine-r1-s1", "direction": "both",
                               "loss_pct": 1},
          "10 % silent drop": {"kind": "silent_drop", "link": "spine-r1-s1 -- leaf-g2-r1", "direction": "both",
                                "loss_pct": 10},
          "black hole": {"kind": "blackhole", "node": "spine-r1-s1", "host": "host-g2-h2"}}
RING = {"kind": "allreduce", "ranks": "rail:1", "order": "naive", "transport": "roce", "size": "8MiB",
        "timeout_s": 60, "qps_per_connection": 2}
COUNTERS = ("naks_received", "retrans_packets", "timeouts", "dodges")


def one_run(lab: Path, label: str, dodge: bool, run: int, folder: Path) -> dict:
    scenario = folder / f"dodge-{'on' if dodge else 'off'}-{list(FAULTS).index(label)}-{run}.yaml"
    job = {**RING, **({"dodge": "offset"} if dodge else {})}
    scenario.write_text(json.dumps({
        "name": scenario.stem, "lab": str(lab), "duration_s": FAULT_AT_S + FAULT_S + 6, "telemetry_ms": 0,
        "workloads": [job], "faults": [{"id": "fault", "at_s": FAULT_AT_S, "duration_s": FAULT_S,
                                        **FAULTS[label]}]}))
    results = run_scenario(scenario, folder / "results")
    row = {"fault": label, "dodge": dodge, **fault_window(results, FAULT_S, COUNTERS)}
    print(f"{label}, dodge {dodge}, run {run}: {row}", flush=True)
    return row


def render(rows: list[dict], command: str) -> list[str]:
    lines = [BEGIN, f"## Dodging per QP: a RoCE job's QPs move by path offset (issue 30, "
             f"{datetime.date.today().isoformat()})", "", f"`{command}` on {machine()}.", "",
             f"{LAB} (routing.hash_offset), rail:1 naive ring (every hop from one leaf to the other, over "
             "spine-r1-s1 or spine-r1-s2 as its QP's hash says), allreduce of 8 MiB over RoCE RC QPs, two per rank "
             f"pair (go-back-N, NCCL's timers: first timeout 4.3 s), DCQCN; the fault at {FAULT_AT_S} s for "
             f"{FAULT_S} s: a 1 % silent drop on leaf-g1-r1 -- spine-r1-s1, a 10 % one on spine-r1-s1 -- leaf-g2-r1 "
             "(both ways), or spine-r1-s1 discarding what it forwards toward host-g2-h2 (a black hole). "
             "dodge: offset: a QP that gets a NAK or a timeout, or whose packets wait 0.1 s for an ACK, moves to its "
             "source port's next offset (a path sharing no spine or superspine with the old one) and sends what "
             "was outstanding again there; a QP that receives packets twice (its ACKs lost) moves its ACKs. Kept: "
             "the healthy steps' mean time over the mean of the steps the fault overlapped; counters summed over "
             "those steps and ranks; missed: runs none of whose QPs met the fault (nothing resent, nothing moved).",
             "",
             "| fault | QPs | busbw kept, each run | slowest step healthy / in the fault (worst run) | NAKs | "
             "resent | timeouts | moves | hangs | missed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label in FAULTS:
        for dodge in (False, True):
            runs = [r for r in rows if r["fault"] == label and r["dodge"] == dodge]
            if not runs:
                continue
            kept = ", ".join("-" if r["kept"] is None else f"{r['kept']:.2f}" for r in runs)
            worst = max(runs, key=lambda r: r["fault_max_step_s"] or 0)
            sums = {k: sum(r[k] for r in runs) for k in (*COUNTERS, "hangs")}
            lines.append(f"| {label} | {'dodge: offset' if dodge else 'RC as NCCL runs it'} | {kept} | "
                         f"{worst['healthy_max_step_s']} / {worst['fault_max_step_s']} s | {sums['naks_received']} | "
                         f"{sums['retrans_packets']:,} | {sums['timeouts']} | {sums['dodges']} | {sums['hangs']} | "
                         f"{sum(1 for r in runs if not r['retrans_packets'] and not r['dodges'])} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--faults", nargs="+", default=list(FAULTS), choices=list(FAULTS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        lab = lab_copy(LAB, NAME, Path(folder))
        try:
            for label in args.faults:
                for run in range(args.runs):
                    for dodge in (False, True):
                        rows.append(one_run(lab, label, dodge, run, Path(folder)))
        finally:
            subprocess.run([*TWIN, "lab", "down", NAME], capture_output=True)
    emit(render(rows, "python bench/roce_dodge.py " + " ".join(sys.argv[1:])), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
