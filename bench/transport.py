"""Benchmark: the emulated RoCE transport against gloo over TCP, under loss and link failures.

    python bench/transport.py --lab rail4 --out docs/benchmarks.md

On one bring-up of the lab (as shipped: lossless):
- loss curve: a rail-aligned allreduce (rail 1, 8 MiB, topology ring) with random loss on one
  host link (leaf-g1-r1 -- host-g1-h1, both directions) at 0, 0.01, 0.1, 0.5, 1, 2 and 5 %,
  roce and tcp side by side: busbw relative to the loss-free run, what roce retransmitted;
- healthy busbw: roce rail-aligned at 8, 32 and 64 MiB against line rate, tcp beside it, and the
  cores' load in both;
- survival: host-g1-h1's link down for 0.3, 1 and 3 s under two roce jobs on rail 1 with two
  retry budgets: survived or failed, after how long, against the lab's BFD timers.
Rewrites the "RoCE transport" section of the output file.
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
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- transport:begin -->", "<!-- transport:end -->"
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]
LOSSES = [0, 0.01, 0.1, 0.5, 1, 2, 5]
LINK = "leaf-g1-r1 -- host-g1-h1"
BUDGETS = [(14, 3), (15, 4)]  # (ib_timeout, retry_cnt): last retry 0.47 s / 2.0 s, give up 1.0 s / 4.2 s
OUTAGES = [0.3, 1.0, 3.0]
ROCE = {"ib_timeout": 20, "retry_cnt": 7, "qps_per_connection": 2, "time_scale": 1.0}


def measure(ctx, transport: str, size: int, iters: int, timeout_s: float):
    from twin.collectives.bench import run_bench
    from twin.errors import TwinError

    try:
        result = run_bench(ctx.lab, "allreduce", [size], "rail:1", iters=iters,
                           warmup=1, timeout_s=timeout_s, transport=transport, roce=ROCE)
    except TwinError as exc:  # the collective gave up (its own timeout) or the job ran too long
        return None, exc.message[:120], []
    return result.measurements[0], None, result.cpu_busy_pct


def survival(lab: str, ib_timeout: int, retry_cnt: int, outage_s: float, folder: Path, results: Path) -> dict:
    name = f"survive-{ib_timeout}-{retry_cnt}-{int(outage_s * 1000)}"
    job = {"kind": "allreduce", "transport": "roce", "ranks": "rail:1", "size": "4MiB", "timeout_s": 60,
           "qps_per_connection": 2, "ib_timeout": ib_timeout, "retry_cnt": retry_cnt}
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps({"name": name, "lab": lab, "duration_s": 12, "telemetry_ms": 0, "workloads": [job],
                                "faults": [{"id": "cut", "kind": "link_down", "link": LINK, "at_s": 4,
                                            "duration_s": outage_s}]}))
    before = set(results.glob(f"{name}-*"))
    subprocess.run([*TWIN, "run", str(path), "--keep", "--results", str(results)], capture_output=True)
    (run,) = sorted(set(results.glob(f"{name}-*")) - before)
    report = json.loads((run / "report.json").read_text())
    onset = report["faults"][0]["applied_s"]
    collective = next(iter(report["collectives"].values()))
    ended = [h["t"] + h["waited_s"] - onset for h in collective["hang_events"] if h["cause"] == "transport_error"]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    steps = [e["step_s"] for e in events if e["kind"] == "collective" and onset - 5 <= e["t"] <= onset + outage_s]
    return {"survived": collective["hangs"] == 0, "failed_after_s": round(min(ended), 2) if ended else None,
            "causes": sorted({h["cause"] for h in collective["hang_events"]}),
            "slowest_step_s": max(steps, default=None), "timeouts": collective["transport_totals"]["timeouts"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", default="rail4")
    parser.add_argument("--size", default="8MiB")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--parts", nargs="+", choices=["loss", "healthy", "survival"],
                        default=["loss", "healthy", "survival"], help="what to run (a table each)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "transport")
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    from twin.faults import engine
    from twin.faults.base import FaultContext
    from twin.lab import deploy
    from twin.lab.files import open_lab
    from twin.roce.qp import last_retry_s, retry_budget_s
    from twin.units import parse_size_bytes

    size = parse_size_bytes(args.size)
    lab_file, fabric = open_lab(args.lab)
    lab = deploy.up(lab_file, fabric)
    loss_rows, healthy_rows, survival_rows = [], [], []
    try:
        ctx = FaultContext(lab)
        base = {}
        for loss in LOSSES if "loss" in args.parts else []:
            row = {}
            if loss:
                timing, params = engine.parse({"id": "loss", "kind": "silent_drop", "link": LINK, "loss_pct": loss})
                engine.inject(ctx, timing, params)
            try:
                for transport in ("roce", "tcp"):
                    print(f"{loss} % loss, {transport}", flush=True)
                    m, error, _cpu = measure(ctx, transport, size, args.iters, 120 if loss else 60)
                    row[transport] = (m, error)
                    if not loss and m:
                        base[transport] = m.busbw
            finally:
                if loss:
                    engine.clear(ctx, "loss")
            cells = []
            for transport in ("roce", "tcp"):
                m, error = row[transport]
                cells.append("failed: " + error if m is None else
                              f"{m.busbw / base[transport]:.2f} ({m.line_fraction(fabric.rate_bps):.2f} of line)")
            roce = row["roce"][0]
            cells.append("-" if roce is None else f"{roce.transport['retrans_bytes'] / 1e6:.1f} MB, "
                         f"{roce.transport['naks_sent']} NAKs, {roce.transport['timeouts']} timeouts")
            loss_rows.append(f"| {loss} % | " + " | ".join(cells) + " |")
        for label in ("8MiB", "32MiB", "64MiB") if "healthy" in args.parts else []:
            cells = []
            for transport in ("roce", "tcp"):
                print(f"healthy {label}, {transport}", flush=True)
                m, error, cpu = measure(ctx, transport, parse_size_bytes(label), args.iters, 120)
                cells.append(f"{m.line_fraction(fabric.rate_bps):.2f} (cores {', '.join(f'{c:.0f}%' for c in cpu)})"
                             if m else "failed: " + error)
            healthy_rows.append(f"| {label} | " + " | ".join(cells) + " |")
        with tempfile.TemporaryDirectory() as tmp:
            for outage in OUTAGES if "survival" in args.parts else []:
                cells = []
                for ib_timeout, retry_cnt in BUDGETS:
                    print(f"link down {outage} s, ib_timeout {ib_timeout}, retry_cnt {retry_cnt}", flush=True)
                    r = survival(fabric.name, ib_timeout, retry_cnt, outage, Path(tmp), args.results)
                    cells.append(f"survived (slowest step {r['slowest_step_s']} s, {r['timeouts']} timeouts)"
                                 if r["survived"] else
                                 f"**failed** {r['failed_after_s']} s after the cut ({', '.join(r['causes'])})")
                survival_rows.append(f"| {outage} s | " + " | ".join(cells) + " |")
    finally:
        deploy.down(fabric.name)

    bfd = fabric.bfd_interval_ms * fabric.bfd_multiplier / 1000
    budgets = [f"ib_timeout {t}, retry_cnt {r}: last retry {last_retry_s(t, r):.2f} s after the last ACK, "
               f"gives up at {retry_budget_s(t, r):.2f} s" for t, r in BUDGETS]
    section = "\n".join([
        BEGIN,
        f"## RoCE transport against TCP (issue 15, {datetime.date.today().isoformat()})",
        "",
        f"`python bench/transport.py --lab {args.lab}` on {machine()}. A rail-aligned allreduce (rail 1, "
        f"{args.size}, topology ring, 2 QPs per rank pair on roce, NCCL's default timers), {args.iters} iterations "
        f"after one warm-up, as `twin bench collective`. Loss: a silent drop on `{LINK}`, both directions.",
        "",
        "Loss curve: busbw relative to the same transport without loss (and against line rate):",
        "",
        "| loss | roce | tcp (gloo) | what roce resent |",
        "| --- | --- | --- | --- |",
        *loss_rows,
        "",
        "Healthy busbw against line rate (and the cores' load while the ranks ran):",
        "",
        "| size | roce | tcp (gloo) |",
        "| --- | --- | --- |",
        *healthy_rows,
        "",
        f"Survival: `{LINK}` down (carrier lost, no other path to the host) for a while, under a roce "
        f"allreduce on rail 1; the lab's BFD detects in {bfd:g} s ({fabric.bfd_interval_ms} ms x "
        f"{fabric.bfd_multiplier}). Budgets: {'; '.join(budgets)}. A job survives an outage that ends before its "
        "last retry leaves (plus what the link takes to carry traffic again).",
        "",
        "| outage | " + " | ".join(f"ib_timeout {t}, retry_cnt {r}" for t, r in BUDGETS) + " |",
        "| --- | " + " | ".join("---" for _ in BUDGETS) + " |",
        *survival_rows,
        END,
    ])
    write_section(args.out, BEGIN, END, section + "\n")
    print(section)


if __name__ == "__main__":
    main()
