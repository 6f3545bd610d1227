"""Benchmark: dual-port NICs (issue 32 item 5, fabric.nic_ports: 2): what the second port gives a
collective, and what a leaf's death costs a RoCE job.

    python bench/dual_port.py --rate 25mbit --runs 2 --out docs/benchmarks.md

Bandwidth: a copy of mini-dual, the same with `dual_plane: true` (each side its own spines), and
for comparison of mini (the same fabric with one port a NIC) at --rate, an allreduce of 8 MiB over
all four NICs in a ring (the rail-aligned case: every NIC on rail 1), as RoCE RC QPs with 1, 2 and
4 QPs per connection (DCQCN on, and once off), as multipath QPs on a copy balancing per packet
(`load_balance: packet`), and as gloo's TCP. busbw against one port's line rate and against the
NIC's (both ports'), and how evenly the hosts' ports sent and received it (the smallest port's
share of its host's bytes; 0.5 is even). The rate is low because
on 2 cores the ranks' CPU, not the fabric, caps a collective at 200 Mbit/s.

Leaf down: `scenarios/dual-tor.yaml` (mini-dual at its 200 Mbit/s, a RoCE RC allreduce, leaf-g1-r1-a
dead from 8 s for 8 s) run --runs times: the slowdown over the fault window (mean step in it /
healthy median), the steps that stalled and how long, RC timeouts, the seconds from the onset to
healthy steps, and from the clear (the fault's clear finished: FRR restarted, routes learnt, host
ports up) to the first step back within 1/0.9 of the healthy median. Rewrites the "dual-port"
section of the file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from twin.collectives.bench import run_bench
from twin.lab import deploy
from twin.lab.files import open_lab
from twin.lab.ports.counters import CounterReader
from twin.units import parse_rate_bps
from twin.workloads.collective import CollectiveParams

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import ROOT, lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

BEGIN, END = "<!-- dual-port:begin -->", "<!-- dual-port:end -->"
SIZE = 8 << 20
ITERS = 4
# (label, lab routing, collective keys)
CASES = (
    ("RC, 1 QP a connection (NCCL's default)", {}, {"transport": "roce"}),
    ("RC, 2 QPs", {}, {"transport": "roce", "qps_per_connection": 2}),
    ("RC, 4 QPs", {}, {"transport": "roce", "qps_per_connection": 4}),
    ("RC, 4 QPs, no DCQCN", {}, {"transport": "roce", "qps_per_connection": 4, "cc": "none"}),
    ("multipath, adaptive per packet", {"load_balance": "packet"}, {"transport": "roce", "multipath": True}),
    ("gloo (TCP)", {}, {"transport": "tcp"}),
)
BACK = 0.9  # back: a step within 1/BACK of the healthy median


def host_port_bytes(lab, counter: str) -> dict[tuple[str, str], int]:
    with CounterReader(lab) as reader:
        snap = reader.read(checksums=False)
    return {key: counters[counter] for key, counters in snap.interfaces.items()
            if lab.fabric.nodes[key[0]].role == "host"}


def evenness(before: dict, after: dict) -> float | None:
    """The smallest share of its host's bytes a port carried (0.5: even), over the hosts."""
    hosts: dict[str, list[int]] = {}
    for (host, _port), value in after.items():
        hosts.setdefault(host, []).append(value - before[(host, _port)])
    shares = [min(sent) / sum(sent) for sent in hosts.values() if len(sent) > 1 and sum(sent)]
    return round(min(shares), 2) if shares else None


def bandwidth(lab_name: str, rate: str, folder: Path, fabric_keys: dict | None = None, label: str = "") -> list[dict]:
    rows = []
    for routing in ({}, {"load_balance": "packet"}):
        cases = [case for case in CASES if case[1] == routing]
        path = lab_copy(lab_name, "dpb" + ("p" if routing else ""), folder, rate=rate, routing=routing or None,
                        fabric=fabric_keys)
        lab_file, fabric = open_lab(str(path))
        with deploy.running(lab_file, fabric, timeout_s=120) as lab:
            for case, _routing, keys in cases:
                params = CollectiveParams(**keys)
                before = {way: host_port_bytes(lab, f"{way}_bytes") for way in ("tx", "rx")}
                roce = params.roce(fabric.mtu, fabric.rate_bps) if params.transport == "roce" else None
                result = run_bench(lab, "allreduce", [SIZE], iters=ITERS, transport=params.transport, roce=roce)
                measured = result.measurements[-1]
                row = {"lab": label or lab_name, "case": case, "busbw_MBps": round(measured.busbw / 1e6, 2),
                       "of_port": round(measured.line_fraction(result.rate_bps), 2),
                       "of_nic": round(measured.line_fraction(result.rate_bps * fabric.nic_ports), 2),
                       **{f"{way}_evenness": evenness(before[way], host_port_bytes(lab, f"{way}_bytes"))
                          for way in ("tx", "rx")}}
                print(row, flush=True)
                rows.append(row)
    return rows


def leaf_down(runs: int, folder: Path) -> list[dict]:
    rows = []
    for run in range(runs):
        results = folder / f"dual-tor-{run}"
        subprocess.run([sys.executable, "-c", "from twin.cli import main; main()", "run", "scenarios/dual-tor.yaml",
                        "--results", str(results)], cwd=ROOT, check=False, capture_output=True)
        [run_dir] = [p for p in results.iterdir() if p.is_dir()]
        report = json.loads((run_dir / "report.json").read_text())
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
        [collective] = report["collectives"].values()
        median = collective["baseline"]["median_step_s"]
        faults = {e["op"]: e for e in events if e.get("kind") == "fault"}
        onset, cleared = faults["applied"]["t"], faults["cleared"]["t"]
        steps = sorted((e["t"], e["step_s"]) for e in events if e.get("kind") == "collective" and e.get("rank") == 0)
        stalled = [s for t, s in steps if t + s >= onset and t <= cleared and s > median / BACK]
        healthy_after_onset = next((t + s for t, s in steps if t >= onset and s <= median / BACK), None)
        back = next((t + s for t, s in steps if t >= cleared and s <= median / BACK), None)
        window = collective["fault_windows"][0]
        grades = {g["kind"]: g["status"] for g in report.get("expectations", [])}
        row = {"run": run, "median_s": round(median, 3), "slowdown": window.get("slowdown"),
               "stalled": [round(s, 2) for s in stalled],
               "timeouts": sum(e.get("timeouts", 0) for e in events if e.get("kind") == "collective"),
               "healthy_after_onset_s": round(healthy_after_onset - onset, 2) if healthy_after_onset else None,
               "back_after_clear_s": round(back - cleared, 2) if back else None,
               "hangs": collective.get("hangs"), "grades": grades}
        print(row, flush=True)
        rows.append(row)
    return rows


def render(bw: list[dict], down: list[dict], rate: str, command: str) -> list[str]:
    lines = [BEGIN, f"## Dual-port NICs (issue 32, {datetime.date.today().isoformat()})", "",
             f"`{command}` on {machine()}.", "",
             f"Bandwidth: copies of mini-dual (each NIC's two ports to two leaves, `nic_ports: 2`), of mini-dual with "
             "`dual_plane: true` (the -a leaves on spines of their own, the -b leaves on theirs) and of mini (one "
             f"port) at {rate} ({parse_rate_bps(rate) / 1e6:g} Mbit/s a port), an allreduce of 8 MiB over the four "
             f"rail-1 NICs in a ring, {ITERS} iterations. busbw against one port's line rate and against the NIC's "
             "(mini-dual: two ports); evenness: the smallest share of its host's bytes a port sent (received), "
             "over the hosts (0.5: even). The NIC places its QPs on its ports in turn (roce/lag.py), so what it "
             "sends is even from 2 QPs a connection; what it receives is not its choice on mini-dual: the NIC's "
             "address is announced by both of its leaves, and each spine hashes a flow to one of them (or, "
             "adaptive, sends it to the one its own queue toward is shorter), so an RC ring's QPs often arrive on "
             "one port, which caps it. On the dual plane what leaves by port a arrives by port a. A multipath QP "
             "of a dual-port NIC paces at both ports' line rate (its DCQCN rates span them, roce/dcqcn.py).",
             "", "| lab | transport | busbw | of a port's line | of the NIC's line | evenness sent | received |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in bw:
        even = ["-" if r[key] is None else f"{r[key]:.2f}" for key in ("tx_evenness", "rx_evenness")]
        lines.append(f"| {r['lab']} | {r['case']} | {r['busbw_MBps']} MB/s | {r['of_port']:.2f} | {r['of_nic']:.2f} "
                     f"| {even[0]} | {even[1]} |")
    lines += ["", "Leaf down: `scenarios/dual-tor.yaml` (mini-dual at 200 Mbit/s, RoCE RC allreduce of 4 MiB, NCCL's "
              "timers: the first retransmission timeout 4.3 s; leaf-g1-r1-a dead from 8 s for 8 s). Slowdown: the "
              "fault window's mean step over the healthy median; stalled: the steps the fault overlapped that took "
              f"over 1/{BACK:g} of the median; healthy after onset: from the onset to the end of the first step "
              "within that; back after the clear: from the clear's end (FRR restarted, routes learnt, host ports up) "
              "to the end of the first such step.", "",
              "| run | healthy step | slowdown | stalled steps | RC timeouts | healthy after onset | back after clear "
              "| hangs | expectations |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in down:
        grades = ", ".join(f"{k} {v}" for k, v in sorted(r["grades"].items()))
        lines.append(f"| {r['run'] + 1} | {r['median_s']} s | x{r['slowdown']} | {r['stalled']} s | {r['timeouts']} | "
                     f"{r['healthy_after_onset_s']} s | {r['back_after_clear_s']} s | {r['hangs']} | {grades} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", default="25mbit", help="the bandwidth labs' line rate")
    parser.add_argument("--runs", type=int, default=2, help="runs of the leaf-down scenario")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        bw = bandwidth("mini-dual", args.rate, Path(folder))
        bw += bandwidth("mini-dual", args.rate, Path(folder), {"dual_plane": True}, "mini-dual, dual plane")
        bw += bandwidth("mini", args.rate, Path(folder))
        down = leaf_down(args.runs, Path(folder))
    emit(render(bw, down, args.rate, "python bench/dual_port.py " + " ".join(sys.argv[1:])), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
