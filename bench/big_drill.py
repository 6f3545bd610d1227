"""Benchmark: a fault drill on the reference-size lab (pod128: a fibre cut, then a silent drop found
by the probe mesh), with what the lab and the mesh cost while it ran.

    python bench/big_drill.py --out docs/benchmarks.md [--scenario bench/scenarios/pod128-drill.yaml]

Runs `twin run` into results/big-drill-<time>, tabulates the report as bench/drills.py does, and
rewrites the "Fault drill at scale" section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from drills import TWIN, tabulate  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN, END = "<!-- big-drill:begin -->", "<!-- big-drill:end -->"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=Path(__file__).parent / "scenarios" / "pod128-drill.yaml")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the lab to converge")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC)
    folder = args.results / f"big-drill-{started:%Y%m%dT%H%M%SZ}"
    command = [*TWIN, "run", str(args.scenario), "--results", str(folder), "--timeout", str(args.timeout)]
    exit_code = subprocess.run(command).returncode
    reports, table = tabulate(folder)
    probes = reports[0].get("probes") or {} if reports else {}
    windows = [probes.get("baseline") or {}, *(probes.get("fault_windows") or [])]
    names = ["before the faults", *(f"during {f['id']}" for f in (reports[0].get("faults") or []))] if reports else []
    mesh = "; ".join(f"{name}: {w.get('sent', 0)} probes, {w.get('lost', 0)} lost" for name, w in zip(names, windows))
    shown = args.scenario.resolve()
    shown = shown.relative_to(Path.cwd()) if shown.is_relative_to(Path.cwd()) else shown
    section = "\n".join([
        BEGIN, "## Fault drill at scale (issue 18)", "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC on {machine()}.",
        f"Command: `python bench/big_drill.py` (= `twin run {shown}`); exit code {exit_code}.", "",
        *table, "", f"Probe mesh: {mesh or '-'}.", "", END, ""])
    if not reports:  # the run never got to a report: keep the last measured section
        sys.exit(f"no report in {folder} (the drill exited {exit_code}): {args.out} left as it was")
    write_section(args.out, BEGIN, END, section)
    print(f"{len(reports)} run(s) ({folder}) tabulated in {args.out}; the drill exited {exit_code}")


if __name__ == "__main__":
    main()
