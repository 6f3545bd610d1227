"""Benchmark: lab up-to-converged and down times, where the time goes, FRR memory per switch.

    python bench/lab_lifecycle.py --labs mini rail4 rail8 --runs 3 --out docs/benchmarks.md

Rewrites the "Lab lifecycle" section of the output file (between its markers), with the
date, the machine and the command, so other benchmarks can keep their own sections.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sections import write_section
from twin.lab import deploy
from twin.lab.files import open_lab
from twin.progress import NullProgress
from twin.procs import alive

BEGIN, END = "<!-- lab-lifecycle:begin -->", "<!-- lab-lifecycle:end -->"


def bfd_resets(state) -> int:
    """BGP sessions that bring-up reset because BFD went down right after they came up."""
    logs = state.directory.glob("nodes/*/frr.log")
    return sum(log.read_text(errors="replace").count("(Cease/BFD Down)") for log in logs)


def pss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return int(re.search(r"^Pss:\s+(\d+) kB", text, re.M).group(1))


def switch_memory_mib(state) -> list[float]:
    per_switch: dict[str, int] = {}
    for res in state.daemons():
        if res.pid and alive(res.pid):
            per_switch[res.node] = per_switch.get(res.node, 0) + pss_kib(res.pid)
    return [kib / 1024 for kib in per_switch.values()]


def run_once(ref: str) -> dict:
    lab, fabric = open_lab(ref)
    start = time.monotonic()
    state = deploy.up(lab, fabric, NullProgress(), timeout_s=120)
    up_s = time.monotonic() - start
    memory = switch_memory_mib(state)
    resets = bfd_resets(state)
    start = time.monotonic()
    deploy.down(fabric.name)
    down_s = time.monotonic() - start
    return {"lab": fabric.name, "nodes": len(fabric.nodes), "switches": len(fabric.switches),
            "links": len(fabric.links), "up_s": up_s, "down_s": down_s, "phases": state.timings_s,
            "mem_mean": statistics.mean(memory), "mem_max": max(memory),
            "bfd_resets": resets}


def machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    frr = subprocess.run(["/usr/lib/frr/zebra", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return (f"{platform.node()}: Linux {platform.release()}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, "
            f"Python {platform.python_version()}, {frr.strip()}")


def render(results: dict[str, list[dict]], runs: int, command: str) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, "## Lab lifecycle (issue 2)", "",
             f"Measured {now} on {machine()}.", f"Command: `{command}` ({runs} runs per lab; median, max).", "",
             "| lab | nodes / links | up to converged (median, max) | down (median) | FRR PSS per switch (mean, max) | BGP resets by BFD at bring-up |",
             "| --- | --- | --- | --- | --- | --- |"]
    for lab, rows in results.items():
        ups, downs = [r["up_s"] for r in rows], [r["down_s"] for r in rows]
        lines.append(
            f"| {lab} | {rows[0]['nodes']} / {rows[0]['links']} | {statistics.median(ups):.1f} s, {max(ups):.1f} s "
            f"| {statistics.median(downs):.2f} s | {statistics.mean(r['mem_mean'] for r in rows):.1f} MiB, "
            f"{max(r['mem_max'] for r in rows):.1f} MiB | {sum(r['bfd_resets'] for r in rows)} in {len(rows)} runs |")
    lines += ["", "Where the time goes (median seconds per phase):", "",
              "| lab | " + " | ".join(next(iter(results.values()))[0]["phases"]) + " |",
              "| --- |" + " --- |" * len(next(iter(results.values()))[0]["phases"])]
    for lab, rows in results.items():
        phases = rows[0]["phases"]
        lines.append(f"| {lab} | " + " | ".join(
            f"{statistics.median(r['phases'].get(p, 0) for r in rows):.2f}" for p in phases) + " |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="+", default=["mini", "rail4", "rail8"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    for lab in args.labs:
        for run in range(args.runs):
            row = run_once(lab)
            results.setdefault(lab, []).append(row)
            print(f"{lab} run {run + 1}: up {row['up_s']:.1f} s, down {row['down_s']:.2f} s, "
                  f"PSS/switch max {row['mem_max']:.1f} MiB, phases {row['phases']}", flush=True)
    section = render(results, args.runs, "make bench  # " + " ".join(sys.argv))
    write_section(args.out, BEGIN, END, section)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
