"""Benchmark: routing convergence and BFD-driven withdrawal under faults on rail4, and how
closely faults follow their schedule. Every figure comes from the runs' own event records.

    python bench/fault_convergence.py --runs 3 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

from twin.results import record
from twin.results.analysis import analyse
from twin.run import runner
from twin.run.plan import load_scenario

sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN, END = "<!-- fault-convergence:begin -->", "<!-- fault-convergence:end -->"
ROOT = Path(__file__).resolve().parent.parent

CASES = [
    ("link_down leaf-spine", "rail4", {"kind": "link_down", "link": "leaf-g1-r1 -- spine-r1-s1"}),
    ("switch_down spine", "rail4", {"kind": "switch_down", "node": "spine-r1-s1"}),
    ("silent_drop 100%, BFD 300 ms x 3", "rail4",
     {"kind": "silent_drop", "link": "leaf-g1-r1 -- spine-r1-s1", "loss_pct": 100}),
    ("silent_drop 100%, BFD 100 ms x 3", "bfd100",
     {"kind": "silent_drop", "link": "leaf-g1-r1 -- spine-r1-s1", "loss_pct": 100}),
]


def scenario_file(directory: Path, lab: str, fault: dict) -> Path:
    lab_ref = lab
    if lab == "bfd100":  # rail4 with BFD at 100 ms x 3
        text = (ROOT / "labs" / "rail4.yaml").read_text().replace("name: rail4", "name: bfd100")
        text = text.replace("bfd: {interval_ms: 300, multiplier: 3}", "bfd: {interval_ms: 100, multiplier: 3}")
        (directory / "bfd100.yaml").write_text(text)
        lab_ref = str(directory / "bfd100.yaml")
    keys = "\n".join(f"    {k}: {v}" for k, v in fault.items())
    path = directory / f"bench-{fault['kind']}-{lab}.yaml"
    path.write_text(f"""name: bench-{fault['kind'].replace('_', '-')}
lab: {lab_ref}
duration_s: 16
workloads:
  - kind: flows
    pps: 50
    interval_ms: 100
faults:
  - id: f
{keys}
    at_s: 5
    duration_s: 6
""")
    return path


def first_after(events, kind, start, state=None):
    times = [e["t"] for e in events if e["kind"] == kind and e["t"] >= start
             and (state is None or e.get("state") == state)]
    return round(min(times) - start, 3) if times else None


def measure(path: Path, results: Path) -> dict:
    run = record.load(runner.run(load_scenario(path), results))
    report = json.loads(analyse(run).to_json())
    fault = report["faults"][0]
    start = fault["applied_s"]
    window = [e for e in run.records if start <= e["t"] <= fault["cleared_s"]]
    return {"bfd_down_s": first_after(window, "bfd", start, "down"),
            "first_route_s": fault["first_route_change_s"], "last_route_s": fault["last_route_change_s"],
            "recovered_s": fault["flows_recovered_after_s"], "loss_pct": fault["flows"]["loss_pct"],
            "schedule_errors": [f["schedule_error_s"] for f in report["faults"]]
            + [round(e["actual_s"] - e["scheduled_s"], 4) for e in run.records
               if e["kind"] == "fault" and e["op"] == "cleared" and e["scheduled_s"] is not None]}


def fmt(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args()
    rows, errors = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        for label, lab, fault in CASES:
            path = scenario_file(tmp_path, lab, fault)
            runs = [measure(path, tmp_path / "results") for _ in range(args.runs)]
            for r in runs:
                print(label, r, flush=True)
                errors += r["schedule_errors"]
            rows.append((label, runs))
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, "## Faults: convergence and BFD (issue 3)", "",
             f"Measured {now} on {machine()}.",
             f"Command: `python bench/fault_convergence.py --runs {args.runs}`. Each run: rail4 up, UDP flows on "
             "every host NIC pair (50 packets/s, 100 ms intervals), the fault at 5 s for 6 s, torn down. "
             "Seconds after the fault was applied; median (min-max) over the runs.", "",
             "| fault | BFD down | first route change | last route change | all flows loss-free again "
             "| flow loss while active |",
             "| --- | --- | --- | --- | --- | --- |"]
    for label, runs in rows:
        lines.append(f"| {label} | {fmt([r['bfd_down_s'] for r in runs])} | {fmt([r['first_route_s'] for r in runs])} "
                     f"| {fmt([r['last_route_s'] for r in runs])} | {fmt([r['recovered_s'] for r in runs])} "
                     f"| {fmt([r['loss_pct'] for r in runs])} % |")
    abs_ms = [abs(e) * 1000 for e in errors]
    lines += ["", f"Fault application accuracy ({len(errors)} applies and clears): scheduled vs actual, "
              f"median {statistics.median(abs_ms):.2f} ms, max {max(abs_ms):.2f} ms (limit 50 ms).", END]
    section = "\n".join(lines) + "\n"
    write_section(args.out, BEGIN, END, section)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
