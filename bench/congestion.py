"""Benchmark: congestion control on a lossless fabric (issue 29): ECN marking in the switches, DCQCN
in the RoCE NIC, ECN for TCP, against PFC alone and against a lossy fabric.

    python bench/congestion.py --lab rail8:100mbit --seconds 60 --out docs/benchmarks.md

On one lab (a shipped lab, optionally at another line rate), three fabrics: lossy (`pfc: false`,
no marking), lossless with PFC alone (`ecn: false`), lossless with ECN (as shipped). On each, an
all-ranks allreduce of 8 MiB back to back for `--seconds`, once over gloo/TCP and once over the
emulated RoCE transport (DCQCN on the fabric that marks, `cc: none` elsewhere): queue drops,
pauses per minute, paused seconds, ECN marks, busbw against line rate, the p99 of the fullest
switch queue (sampled every 100 ms), CNPs and the controller's reaction. Then an 8:1 RoCE incast
(twin/collectives/incast.py) with and without DCQCN on the lossless fabric: the receiver's
goodput, Jain's index of the senders over 1 s windows, pauses (in its first second, before congestion
control can act, and after), drops. `--rounds 0` runs the incasts alone. Rewrites the "Congestion
control" section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from lossless import measured_incast, run_scenario  # noqa: E402
from sections import emit  # noqa: E402

BEGIN, END = "<!-- congestion:begin -->", "<!-- congestion:end -->"
FABRICS = {"lossy": {"pfc": False, "ecn": False}, "PFC alone": {"pfc": True, "ecn": False},
           "PFC + ECN": {"pfc": True, "ecn": True}}


def lab_variant(name: str, rate: str | None, settings: dict, suffix: str, folder: Path) -> Path:
    return lab_copy(name, f"{name}{suffix}"[:12], folder, rate, settings)


def queue_p99(metrics: Path, switches: set[str]) -> int | None:
    """The 99th percentile, over the counter samples, of the fullest switch queue at each sample:
    the qdisc backlog, which every lab has (lossy ones run no queue programs), sampled every
    500 ms. Hosts' queues are left out: a sending host's NIC holds what its own stack sends."""
    if not metrics.is_file():
        return None
    lines = metrics.read_text().splitlines()
    header = json.loads(lines[0])
    column = header["fields"].index("backlog_bytes")
    ours = [i for i, name in enumerate(header["interfaces"]) if name.partition(":")[0] in switches]
    fullest = sorted(max(json.loads(line)["v"][i][column] for i in ours) for line in lines[1:])
    return fullest[min(len(fullest) - 1, int(0.99 * len(fullest)))] if fullest else None


def collective(lab: Path, transport: str, cc: str, seconds: float, folder: Path, results: Path) -> dict:
    workload = {"kind": "allreduce", "size": "8MiB", "ranks": "all", "timeout_s": 60, "transport": transport}
    if transport == "roce":
        workload["cc"] = cc
    doc = {"name": f"cc-{transport}-{lab.stem}", "lab": str(lab), "duration_s": seconds, "telemetry_ms": 100,
           "workloads": [workload]}
    report = run_scenario(doc, folder, results)
    newest = sorted(results.glob(f"{doc['name']}-*"))[-1]
    from twin.lab.files import open_lab
    switches = {node.name for node in open_lab(str(lab))[1].switches}
    report["queue_p99"] = queue_p99(newest / "metrics.jsonl", switches)
    return report


def busbw_of(report: dict, rate_bps: int) -> float | None:
    work = next(iter(report["collectives"].values()), {})
    busbw = work.get("baseline", {}).get("median_busbw_Bps")
    return busbw * 8 / rate_bps if busbw else None


def row(fabric: str, transport: str, cc: str, report: dict, rate_bps: int, seconds: float, number: int) -> str:
    queues = report["fabric"] or {}
    work = next(iter(report["collectives"].values()), {})
    busbw = busbw_of(report, rate_bps)
    totals = work.get("transport_totals") or {}
    reaction = (queues.get("controller") or {}).get("reaction", {})
    p99 = report.get("queue_p99")
    return " | ".join([fabric, transport + (f" ({cc})" if transport == "roce" else ""), str(number),
                       str(queues.get("queue_drops")),
                       f"{queues.get('pauses', 0) * 60 / seconds:,.0f}",
                       f"{sum(queues.get('pause_s', {}).values()):.2f}",
                       f"{(queues.get('ecn_marked') or {}).get('total', 0):,}",
                       "-" if not busbw else f"{busbw:.2f}",
                       "-" if p99 is None else f"{p99 / 1000:.1f}",
                       str(totals.get("cnps_received", "-")) if transport == "roce" else "-",
                       (f"{reaction.get('p99_us', '-')} / {reaction.get('max_us', '-')}"
                        if reaction.get("events") else "-"),
                       report["cpu_busy"]])


def incast(lab_path: Path, seconds: float, cc: str) -> dict:
    from twin.collectives.incast import roce_incast

    def send(lab, senders, receiver) -> dict:
        result = roce_incast(lab, senders, receiver, seconds, cc=cc)
        fairness = result.fairness()
        return {"cc": cc, "goodput": result.goodput_bps() / lab.fabric.rate_bps,
                "jain_min": min(fairness, default=None),
                "jain_median": statistics.median(fairness) if fairness else None,
                "cnps": result.stats.get("cnps_received", 0), "retrans_mb": result.stats.get("retrans_bytes", 0) / 1e6}
    return measured_incast(lab_path, send)


def median(values: list[float | None]) -> str:
    measured = [v for v in values if v is not None]
    return f"{statistics.median(measured):.2f}" if measured else "-"


def runs(values: list[float | None]) -> str:
    return ", ".join("-" if v is None else f"{v:.2f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", default="rail8:100mbit")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--incast-s", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of every fabric and transport, in turn: identical runs differ by up to 0.12 of "
                             "line (gloo's ephemeral ports place its flows on the ECMP paths anew each run)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    name, _, rate = args.lab.partition(":")
    rows, incasts = [], []
    busbw: dict[tuple[str, str], list[float | None]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder, results = Path(scratch), Path(scratch) / "results"
        from twin.lab.files import open_lab
        labs = {fabric: lab_variant(name, rate, settings, f"-c{number}", folder)
                for number, (fabric, settings) in enumerate(FABRICS.items())}
        rate_bps = open_lab(str(labs["lossy"]))[1].rate_bps
        for number in range(1, args.rounds + 1):
            for fabric, settings in FABRICS.items():
                for transport in ("tcp", "roce"):
                    cc = "dcqcn" if settings["ecn"] else "none"
                    print(f"round {number}: {fabric}, {transport} ...", flush=True)
                    report = collective(labs[fabric], transport, cc, args.seconds, folder, results)
                    rows.append(row(fabric, transport, cc, report, rate_bps, args.seconds, number))
                    busbw.setdefault((fabric, transport), []).append(busbw_of(report, rate_bps))
                    print(rows[-1], flush=True)
        lossless = lab_variant(name, rate, FABRICS["PFC + ECN"], "-ci", folder)
        for cc in ("none", "dcqcn"):
            print(f"incast, {cc} ...", flush=True)
            incasts.append(incast(lossless, args.incast_s, cc))
            print(incasts[-1], flush=True)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## Congestion control: ECN, DCQCN, TCP's ECN against PFC alone (issue 29, {now[:10]})", "",
             f"`python bench/congestion.py --lab {args.lab} --seconds {args.seconds:g} --incast-s {args.incast_s:g} "
             f"--rounds {args.rounds}` "
             f"on {machine()}, {now}.", "",
             f"All-ranks allreduce of 8 MiB for {args.seconds:g} s, each fabric and transport once a round, "
             f"{args.rounds} rounds. Pauses per minute and paused seconds over all link "
             "directions; marks: packets switch queues marked CE; queue p99: the fullest switch queue at each 100 ms "
             "sample (qdisc backlog, every 500 ms), its 99th percentile; CNPs: received by the senders; "
             "reaction: the PFC "
             "controller's, p99 / max us.",
             "", "| fabric | transport | round | queue drops | pauses / min | paused s | ECN marks | busbw / line | "
             "queue p99 KB | CNPs | reaction | cores busy |", "| --- |" + " --- |" * 11,
             *[f"| {r} |" for r in rows], "",
             "busbw / line over the rounds (median, and every run's; -: the run measured no iteration):", "",
             "| fabric | transport | median | runs |", "| --- | --- | --- | --- |",
             *[f"| {fabric} | {transport} | {median(values)} | {runs(values)} |"
               for (fabric, transport), values in busbw.items()], "",
             f"8:1 RoCE incast for {args.incast_s:g} s on the lossless fabric with ECN (goodput at the receiver over "
             "line rate, Jain's index of the senders over 1 s windows, after 1 s):", "",
             "| cc | senders | goodput / line | Jain min / median | pauses | pauses in the first second / after | "
             "ECN marks | CNPs | queue drops | resent MB | cores busy |", "| --- |" + " --- |" * 10]
    for i in incasts:
        jain = "-" if i["jain_min"] is None else f"{i['jain_min']:.3f} / {i['jain_median']:.3f}"
        onset, after = i["pauses_onset_after"]
        lines.append(f"| {i['cc']} | {i['senders']} | {i['goodput']:.2f} | {jain} | {i['pauses']:,} | "
                     f"{onset:,} / {after:,} | {i['marks']:,} | "
                     f"{i['cnps']:,} | {i['drops']} | {i['retrans_mb']:.1f} | {i['cpu_busy']} |")
    emit(lines + [""], args.out, BEGIN, END)


if __name__ == "__main__":
    main()
