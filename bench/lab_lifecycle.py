"""Benchmark: lab up-to-converged and down times, where the time goes, FRR memory per switch, and the
lab's CPU at rest (its own processes and the whole machine), from mini to pod128.

    python bench/lab_lifecycle.py --labs mini rail4 rail8 pod64 pod128 --runs 1 --out docs/benchmarks.md

Rewrites the "Lab lifecycle" section of the output file (between its markers), with the
date, the machine and the command, so other benchmarks can keep their own sections.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sections import write_section

from twin.lab import deploy, idle
from twin.lab.files import open_lab
from twin.procs import alive
from twin.progress import NullProgress

REST_SETTLE_S, REST_WINDOW_S = 10.0, 20.0  # after convergence: let BGP and BFD settle, then sample

BEGIN, END = "<!-- lab-lifecycle:begin -->", "<!-- lab-lifecycle:end -->"


def bfd_resets(state) -> int:
    """BGP sessions that bring-up reset because BFD went down right after they came up."""
    logs = state.directory.glob("nodes/*/frr.log")
    return sum(log.read_text(errors="replace").count("(Cease/BFD Down)") for log in logs)


pss_kib = idle.pss_kib


def switch_memory_mib(state) -> list[float]:
    per_switch: dict[str, int] = {}
    for res in state.daemons():
        if res.pid and alive(res.pid):
            per_switch[res.node] = per_switch.get(res.node, 0) + pss_kib(res.pid)
    return [kib / 1024 for kib in per_switch.values()]


def run_once(ref: str, timeout_s: float) -> dict:
    lab, fabric = open_lab(ref)
    start = time.monotonic()
    state = deploy.up(lab, fabric, NullProgress(), timeout_s=timeout_s).state
    up_s = time.monotonic() - start
    memory = switch_memory_mib(state)
    resets = bfd_resets(state)
    time.sleep(REST_SETTLE_S)
    rest = idle.measure(state, REST_WINDOW_S)
    start = time.monotonic()
    deploy.down(fabric.name)
    down_s = time.monotonic() - start
    return {"lab": fabric.name, "nodes": len(fabric.nodes), "switches": len(fabric.switches),
            "links": len(fabric.links), "up_s": up_s, "down_s": down_s, "phases": state.timings_s,
            "mem_mean": statistics.mean(memory), "mem_max": max(memory),
            "bfd_resets": resets, "rest_cores": rest.cores, "rest_machine": rest.machine_busy_cores,
            "rest_programs": rest.by_program, "bfd": f"{fabric.bfd_interval_ms} ms x {fabric.bfd_multiplier}",
            "bfd_sessions": idle.bfd_sessions(fabric), "bfd_estimate": idle.bfd_cores(fabric)}


def machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    frr = subprocess.run(["/usr/lib/frr/zebra", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return (f"{platform.node()}: Linux {platform.release()}, {os.cpu_count()} cores, {mem_gib:.0f} GiB, "
            f"Python {platform.python_version()}, {frr.strip()}")


def render(results: dict[str, list[dict]], runs: int, command: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, "## Lab lifecycle (issues 2 and 18)", "",
             f"Measured {now} on {machine()}.", f"Command: `{command}` ({runs} runs per lab; median, max).", "",
             "| lab | switches / nodes / links | BFD | up to converged (median, max) | per switch | down (median) "
             "| FRR PSS per switch (mean, max) | BGP resets by BFD at bring-up |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for lab, rows in results.items():
        ups, downs = [r["up_s"] for r in rows], [r["down_s"] for r in rows]
        lines.append(
            f"| {lab} | {rows[0]['switches']} / {rows[0]['nodes']} / {rows[0]['links']} | {rows[0]['bfd']} "
            f"| {statistics.median(ups):.1f} s, {max(ups):.1f} s "
            f"| {statistics.median(ups) / rows[0]['switches']:.2f} s "
            f"| {statistics.median(downs):.2f} s | {statistics.mean(r['mem_mean'] for r in rows):.1f} MiB, "
            f"{max(r['mem_max'] for r in rows):.1f} MiB | {sum(r['bfd_resets'] for r in rows)} in {len(rows)} runs |")
    lines += ["", f"At rest ({REST_SETTLE_S:.0f} s after convergence, sampled over {REST_WINDOW_S:.0f} s; cores "
              "of one): the lab's own processes, the whole machine (kernel forwarding included), and what "
              "`twin plan` estimates for BFD from its measured cost per packet:", "",
              "| lab | BFD sessions | lab processes | by program | machine busy | BFD estimate |",
              "| --- | --- | --- | --- | --- | --- |"]
    for lab, rows in results.items():
        row = rows[-1]
        programs = ", ".join(f"{k} {v:.2f}" for k, v in list(row["rest_programs"].items())[:4])
        lines.append(f"| {lab} | {row['bfd_sessions']} | {statistics.median(r['rest_cores'] for r in rows):.2f} "
                     f"| {programs} | {statistics.median(r['rest_machine'] for r in rows):.2f} "
                     f"| {row['bfd_estimate']:.2f} |")
    phase_names = list(dict.fromkeys(p for rows in results.values() for r in rows for p in r["phases"]))
    lines += ["", "Where the time goes (median seconds per phase):", "",
              "| lab | " + " | ".join(phase_names) + " |",
              "| --- |" + " --- |" * len(phase_names)]
    for lab, rows in results.items():
        lines.append(f"| {lab} | " + " | ".join(
            f"{statistics.median(r['phases'].get(p, 0) for r in rows):.2f}" for p in phase_names) + " |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="+", default=["mini", "rail4", "rail8", "pod64", "pod128"])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to converge, per lab")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    for lab in args.labs:
        for run in range(args.runs):
            row = run_once(lab, args.timeout)
            results.setdefault(lab, []).append(row)
            print(f"{lab} run {run + 1}: up {row['up_s']:.1f} s, down {row['down_s']:.2f} s, "
                  f"PSS/switch max {row['mem_max']:.1f} MiB, phases {row['phases']}", flush=True)
    section = render(results, args.runs, "make bench  # " + " ".join(sys.argv))
    write_section(args.out, BEGIN, END, section)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
