"""Benchmark: the cover probe mesh's cost against lab size (issue 17).

    python bench/probe_cover.py --run mini rail4 rail8 --plan-only gen:3,8,8,2,4,8 gen:3,16,8,2,8,16 \
        --out docs/benchmarks.md

Per lab, from the model (no lab needed): flows probed (and those testing only a leaf's route toward a
host, probed once per reporting interval), candidate ports discovered, probes/s at
100 ms, probes/s per link direction (the fewest and the median), link directions short of
paths_per_link, and what probing every same-rail NIC pair (the old cover) would cost. For the
labs in --run, a real mesh for --seconds: achieved probes/s, the agents' CPU per 1000 probes/s,
the coverage the discovered paths gave. From the measured CPU cost: the largest of these labs
the mesh covers at 100 ms with PROBE_CPU_SHARE of the machine. `gen:T,G,R,H,S,SS` is a lab of
that shape (tiers, groups, rails, hosts per group, spines per plane, superspines).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

from twin.lab import deploy
from twin.lab.files import open_lab
from twin.probes.pace import MIN_LINK_PPS, floor_per_interval
from twin.probes.run import run_probe_mesh
from twin.probes.selection import PATHS_PER_LINK, REPORT_MS, cover_plan, plan, probe_load
from twin.progress import NullProgress

sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN, END = "<!-- probe-cover:begin -->", "<!-- probe-cover:end -->"
INTERVAL_MS = 100
PROBE_CPU_SHARE = 0.5  # of one core: what the mesh may take on the twin's two shared cores


def generated(spec: str, scratch: Path) -> tuple[Path, str]:
    tiers, groups, rails, hosts, spines, superspines = (int(x) for x in spec.split(":", 1)[1].split(","))
    shape = f"tiers: {tiers}, groups: {groups}, rails: {rails}, hosts_per_group: {hosts}, spines_per_plane: {spines}"
    if tiers == 3:
        shape += f", superspines: {superspines}"
    name = f"g{groups}r{rails}s{spines}x{superspines}"[:12]
    path = scratch / f"{name}.yaml"
    path.write_text(f"name: {name}\nfabric: {{{shape}}}\nlinks: {{rate: 100mbit, mtu: 9000}}\n"
                    "routing: {bfd: {interval_ms: 300, multiplier: 3}}\n")
    return path, name


def model_figures(fabric) -> dict:
    started = time.process_time()
    covering = cover_plan(fabric, PATHS_PER_LINK, floor=floor_per_interval(MIN_LINK_PPS, INTERVAL_MS, PATHS_PER_LINK))
    took = time.process_time() - started
    selection = covering.expected.summary(covering.hops, PATHS_PER_LINK)
    same_rail = probe_load(plan(fabric, "rail"), INTERVAL_MS)["probes_per_s"] if len(fabric.hosts) <= 64 else None
    return {"switches": len(fabric.switches), "links": len(fabric.links), "hops": covering.hops,
            "flows": selection["flows"], "route_flows": selection["route_flows"],
            "paced_flows": selection["paced_flows"],
            "candidates": sum(len(p.sports) for p in covering.plans),
            "pps": probe_load(covering.plans, INTERVAL_MS)["probes_per_s"],
            "link_pps_min": selection["links_min"] * 1000 / INTERVAL_MS,
            "link_pps_median": selection["links_median"] * 1000 / INTERVAL_MS,
            "short": covering.hops - selection["hops_covered"], "unreachable": len(covering.unreachable),
            "same_rail_pps": same_rail, "plan_cpu_s": round(took, 2)}


def measured(lab_path: str, seconds: float) -> dict:
    lab_file, fabric = open_lab(lab_path)
    lab = deploy.up(lab_file, fabric, NullProgress(), timeout_s=300)
    try:
        summary = run_probe_mesh(lab, seconds, INTERVAL_MS)
    finally:
        deploy.down(lab.state.lab, NullProgress())
    per_s = summary["cpu_s"] / summary["probing_s"]
    return {"achieved_pps": summary["achieved_pps"], "cpu_per_s": round(per_s, 3),
            "cpu_per_kpps": round(per_s / max(1.0, summary["achieved_pps"]) * 1000, 3),
            "lost": summary["lost"], "sent": summary["sent"], "coverage": summary["coverage"]}


def render(rows: list[dict], command: str, seconds: float) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## Probe mesh by link coverage: cost against lab size (issue 17, {now[:10]})", "",
             f"Measured {now} on {machine()}.", f"Command: `{command}`", "",
             f"`pairs: cover`, paths_per_link {PATHS_PER_LINK}, min_link_pps {MIN_LINK_PPS} (flows over the directions "
             "fewer probes cross probed more than once an interval: `paced`), "
             f"interval {INTERVAL_MS} ms. Model columns come from the "
             "plan (the selection run on paths drawn from the model with the plan's seed); measured columns from a "
             f"real mesh of {seconds:g} s on the lab (the selection on the paths the agents discovered).", "",
             "| lab | switches / links / link directions | flows (per direction) | route flows (once per "
             f"{REPORT_MS} ms) | paced flows | candidate ports | probes/s | "
             "per link direction, fewest / median | short / unreachable "
             "| every same-rail NIC pair instead (quadratic; superspines not crossed) | plan CPU | "
             "measured: flows, probes/s, short | agents' CPU per 1000 probes/s | lost |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        m = row.get("measured")
        real = (f"{m['coverage']['flows']} + {m['coverage'].get('route_flows', 0)}, {m['achieved_pps']:.0f}, "
                f"{m['coverage']['hops_short']}",
                f"{m['cpu_per_kpps']} core-s",
                f"{m['lost']} of {m['sent']}") if m else ("not run", "", "")
        lines.append(f"| {row['lab']} | {row['switches']} / {row['links']} / {row['hops']} | {row['flows']} "
                     f"({row['flows'] / row['hops']:.2f}) | {row['route_flows']} | {row['paced_flows']} | "
                     f"{row['candidates']} | "
                     f"{row['pps']:.0f} | "
                     f"{row['link_pps_min']:.0f} / {row['link_pps_median']:.0f} "
                     f"| {row['short']} / {row['unreachable']} | "
                     f"{row['same_rail_pps'] if row['same_rail_pps'] is not None else 'not planned'} | "
                     f"{row['plan_cpu_s']} s | {real[0]} | {real[1]} | {real[2]} |")
    costs = [r["measured"]["cpu_per_kpps"] for r in rows if r.get("measured")]
    if costs:
        worst = max(costs)
        budget = PROBE_CPU_SHARE / worst * 1000
        fits = [r for r in rows if r["pps"] <= budget]
        largest = max(fits, key=lambda r: r["hops"]) if fits else None
        lines += ["", f"Largest lab covered at {INTERVAL_MS} ms within {PROBE_CPU_SHARE:.0%} of a core: the agents "
                  f"cost at most {worst} core-s per 1000 probes/s, so about {budget:.0f} probes/s fit; "
                  "of the labs above "
                  + (f"that is {largest['lab']} ({largest['switches']} switches, {largest['pps']:.0f} probes/s). "
                     if largest else "none. ")
                  + "Larger labs keep every link covered by raising interval_ms (the cost per link direction is "
                  f"about {PATHS_PER_LINK} x 1000 / interval_ms probes/s, paced up toward {MIN_LINK_PPS} where that is "
                  "fewer)."]
    lines += [END]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", nargs="*", default=["mini", "rail4", "rail8"], help="labs to measure for real")
    parser.add_argument("--plan-only", nargs="*", default=[], help="labs planned from the model only")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if os.geteuid() != 0 and args.run:
        sys.exit("measuring needs root (it brings labs up)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="probe-cover-") as scratch:  # the generated labs' files
        for ref in [*args.run, *args.plan_only]:
            path, name = generated(ref, Path(scratch)) if ref.startswith("gen:") else (ref, ref)
            fabric = open_lab(str(path))[1]
            row = {"lab": name, **model_figures(fabric)}
            if ref in args.run:
                row["measured"] = measured(str(path), args.seconds)
            print(row, flush=True)
            rows.append(row)
    command = "python bench/probe_cover.py " + " ".join(sys.argv[1:])
    section = render(rows, command, args.seconds)
    print(section)
    if args.out:
        write_section(args.out, BEGIN, END, section)


if __name__ == "__main__":
    main()
