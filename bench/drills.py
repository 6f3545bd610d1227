"""Benchmark: detection, failover and recovery per shipped scenario, from real runs.

    python bench/drills.py --out docs/benchmarks.md [--quick] [SCENARIO ...]

Runs the fault drill (`twin e2e`, full timelines unless --quick) into results/drills-<time> and
tabulates every run's report.json: per fault the time to the first right verdict per detector,
precision and recall, wrong verdicts, first and last route change after onset, when all flows
were loss-free again, the collective's slowdown and hangs, what mitigation did; and whether
the scenario's expectations passed. Rewrites the "Fault drills" section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN, END = "<!-- drills:begin -->", "<!-- drills:end -->"
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]


def fmt(value, unit: str = " s") -> str:
    return "-" if value is None else f"{value}{unit}"


def rows(report: dict) -> list[str]:
    out = []
    detectors = report.get("detectors", {})
    mitigation = report.get("mitigation") or {}
    dodges = (mitigation.get("dodges") or {}).get("moved")
    drains = [s for s in mitigation.get("isolation", []) if s["op"] == "drained"]
    for number, f in enumerate(report["faults"]):
        detected = ("; ".join(f"{name} {fmt(d['detect_s'].get(f['id']))}" for name, d in detectors.items())
                    or "no detector")
        scores = "; ".join(f"{d['precision']} / {d['recall']}" for d in detectors.values()) or "-"
        wrong = sum(d["wrong"] for d in detectors.values()) if detectors else "-"
        slow = []
        for name, c in report.get("collectives", {}).items():
            window = c["fault_windows"][number]
            slow.append(f"{name} x{window.get('slowdown', 'stalled')}"
                        + (f", {c['hangs']} hang(s)" if c["hangs"] else ""))
        done = [f"{dodges} flow moves"] if dodges else []
        done += [f"drained {d['link']} at {d['t'] - (f['applied_s'] or 0):.2f} s" for d in drains]
        out.append(" | ".join([
            report["scenario"], f"{f['id']} ({f['kind']})", "pass" if report["passed"] else "**fail**", detected,
            scores,
            str(wrong), f"{fmt(f.get('first_bfd_down_s'))} / {fmt(f['first_route_change_s'])} / "
                        f"{fmt(f['last_route_change_s'])}",
            ("never" if f["flows_recovered_after_s"] is None and f["flows"]["sent"]
             else fmt(f["flows_recovered_after_s"])),
            "; ".join(slow) or "-", "; ".join(done) or "-"]))
    if not report["faults"]:
        wrong = sum(d["wrong"] for d in detectors.values())
        probes = report.get("probes") or {}
        lost = probes.get("baseline", {}).get("lost")
        out.append(f"{report['scenario']} | (no fault, {report['duration_s']:g} s) | "
                   f"{'pass' if report['passed'] else '**fail**'} | - | - | {wrong} | - | "
                   f"{'-' if lost is None else f'{lost} probes lost'} | - | -")
    return ["| " + r + " |" for r in out]


def tabulate(folder: Path) -> tuple[list[dict], list[str]]:
    """The reports of the runs under `folder` and their table (header and one row per fault)."""
    reports = [json.loads(p.read_text()) for p in sorted(folder.glob("*/report.json"))]
    table = ["| scenario | fault | expectations | detected after (per detector) | precision / recall | "
             "wrong verdicts | BFD down / first / last route change | all flows loss-free after | collective | "
             "mitigation |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for report in reports:
        table += rows(report)
    return reports, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="names from scenarios/ (default: all)")
    parser.add_argument("--quick", action="store_true", help="shortened timelines, as CI runs them")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--results", type=Path, default=Path("results"), help="the runs' results go here")
    parser.add_argument("--tabulate", type=Path, metavar="DIR", help="only tabulate the runs already in DIR")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC)
    if args.tabulate:
        folder, exit_code = args.tabulate, None
        started = datetime.datetime.fromtimestamp(folder.stat().st_mtime, datetime.UTC)
    else:
        folder = args.results / f"drills-{started:%Y%m%dT%H%M%SZ}"
        command = [*TWIN, "e2e", *args.scenarios, "--results", str(folder)] + (["--quick"] if args.quick else [])
        exit_code = subprocess.run(command).returncode
    reports, table = tabulate(folder)
    section = "\n".join([
        BEGIN, "## Fault drills: detection, failover, recovery (issue 5)", "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC on {machine()}.",
        f"Command: `python bench/drills.py{' --quick' if args.quick else ''}` (= `twin e2e"
        f"{' --quick' if args.quick else ''}`, one run per scenario, "
        f"{'shortened' if args.quick else 'full'} timelines). Times are seconds after the fault's onset; "
        "detection counts from the end of the fault's apply. Flows are UDP, 20-50 packets/s per NIC "
        "pair in 500 ms intervals, so recovery figures are quantised to 0.5 s; \"never\" means some "
        "flow still lost packets at the end of the fault window. \"BFD down\" is when the runner read "
        "FRR's log line (FRR stamps whole seconds; the log is read every 50 ms), so it can trail the "
        "kernel's route change, which a lost carrier triggers at once.", "", *table, "", END, ""])
    write_section(args.out, BEGIN, END, section)
    print(f"{len(reports)} runs ({folder}) tabulated in {args.out}" +
          ("" if exit_code is None else f"; the drill exited {exit_code}"))


if __name__ == "__main__":
    main()
