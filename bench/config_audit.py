"""Benchmark: what config-audit costs at rest, and how soon it names each misconfiguration (issue 31).

    python bench/config_audit.py --labs mini rail4 rail8 --sweeps 20 --out docs/benchmarks.md

Brings each lab up (a copy under another name), sweeps it `--sweeps` times as the detector does
(bgpd's running config over its vty socket, the hash sysctl, one MTU ioctl per port, the PFC
controller's marking and classes, each switch's LLDP neighbours), and reports per sweep the wall
time and the CPU time (this process and any it runs), per switch and per node, and the
share of a core the detector takes at rest (a sweep every second, or every ten sweeps' cost on a
big lab), and what LLDP costs at rest. Then, on the last lab, injects each kind of the training
pools' misconfiguration in turn (drawn by the kind, seeded; and ECN marking off on one switch),
and times from the injection to the first sweep that finds it, sweeping back to back: the
detector's own delay, without the wait for its next sweep (at most one interval more).
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

from twin.detect import config_audit  # noqa: E402
from twin.faults import engine  # noqa: E402
from twin.faults.base import FaultContext  # noqa: E402
from twin.faults.registry import FAULTS  # noqa: E402
from twin.lab import deploy, idle  # noqa: E402
from twin.lab.files import open_lab  # noqa: E402
from twin.lab.routing import lldp  # noqa: E402
from twin.procs import children  # noqa: E402

BEGIN, END = "<!-- config-audit:begin -->", "<!-- config-audit:end -->"


def sweep_cost(lab, sweeps: int) -> tuple[float, float]:
    """Median wall and CPU seconds of one sweep over `sweeps`; every sweep must find nothing."""
    walls, cpus = [], []
    for _ in range(sweeps):
        wall, cpu = time.monotonic(), _cpu_s()
        findings = config_audit.sweep(lab)
        walls.append(time.monotonic() - wall)
        cpus.append(_cpu_s() - cpu)
        if findings:
            raise SystemExit(f"{lab.name}: config-audit found {findings} on a lab that matches its intent")
    return statistics.median(walls), statistics.median(cpus)


def _cpu_s() -> float:
    """This process's CPU and its children's (none today: FRR and lldpd are asked over their sockets)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def lldp_cost(lab, window_s: float) -> tuple[float, float]:
    """LLDP at rest: MB of proportional memory per node (lldpd and its unprivileged child) and the
    share of a core all of them take over `window_s`."""
    monitors = [r.pid for r in lab.state.resources if r.kind == lldp.RESOURCE_KIND and r.pid]
    pids = [pid for monitor in monitors for pid in (monitor, *children(monitor))]
    before = idle.family_ticks(monitors)  # each with its children's
    time.sleep(window_s)
    after = idle.family_ticks(monitors)
    ticks = sum((after[pid] or 0) - (before[pid] or 0) for pid in monitors)
    nodes = sum(1 for r in lab.state.resources if r.kind == lldp.RESOURCE_KIND)
    pss_mb = sum(idle.pss_kib(pid) for pid in pids) / 1024 / max(1, nodes)
    return pss_mb, 100 * ticks / os.sysconf("SC_CLK_TCK") / window_s


def time_to_name(lab, seed: int) -> list[tuple[str, str, float]]:
    """(kind, target, seconds from injection to the first sweep that finds it) per level-4 kind."""
    rng = random.Random(seed)
    links = sorted(link.name for link in lab.fabric.links if link.kind != "host")
    between = [name for name in links if all(lab.fabric.nodes[n].is_switch for n in name.split(" -- "))]
    entries = [{"kind": name, **FAULTS.get(name).training_entry(lab.fabric, rng, between)}
               for name in sorted(k for k, kind in FAULTS.items() if kind.training_level == 4)]
    if lab.fabric.ecn:  # not in the training pools (visible under load only), named all the same
        entries.append({"kind": "ecn_thresholds", "node": rng.choice(sorted(n.name for n in lab.fabric.switches)),
                        "kmin_kb": 0})
    rows = []
    for number, entry in enumerate(entries, 1):
        entry, name = {"id": f"bench-{number}", **entry}, entry["kind"]
        timing, params = engine.parse(entry)
        ctx = FaultContext(lab, seed=seed)
        started = time.monotonic()
        injected = engine.inject(ctx, timing, params)
        try:
            while not config_audit.sweep(lab):
                if time.monotonic() - started > 30:
                    raise SystemExit(f"config-audit did not find {entry} within 30 s")
            took = time.monotonic() - started
        finally:
            engine.clear(ctx, timing.id)
        rows.append((name, ", ".join(injected["targets"]), took))
        time.sleep(2)  # BGP back before the next
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labs", nargs="+", default=["mini", "rail4", "rail8"])
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lldp-window", type=float, default=20.0, help="seconds to sample LLDP's CPU at rest")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    costs, named, lldp_rows = [], [], []
    with tempfile.TemporaryDirectory(prefix="config-audit.") as scratch:
        for name in args.labs:
            lab_file, fabric = open_lab(str(lab_copy(name, f"ca-{name}", Path(scratch))))
            print(f"{name}: up ...", flush=True)
            lab = deploy.up(lab_file, fabric)
            try:
                wall, cpu = sweep_cost(lab, args.sweeps)
                switches, nodes = len(fabric.switches), len(fabric.nodes)
                interval = max(config_audit.MIN_SWEEP_S, 10 * wall)
                costs.append(f"| {name} | {switches} / {nodes} | {wall * 1000:.1f} | {cpu * 1000:.1f} | "
                             f"{cpu * 1000 / switches:.2f} | {cpu * 1000 / nodes:.2f} | {interval:.1f} | "
                             f"{100 * cpu / interval:.1f} % |")
                print(costs[-1], flush=True)
                pss_mb, core_pct = lldp_cost(lab, args.lldp_window)
                lldp_rows.append(f"| {name} | {nodes} | {lab.state.timings_s.get('lldp', 0):.2f} | {pss_mb:.1f} | "
                                 f"{core_pct:.2f} % |")
                print(lldp_rows[-1], flush=True)
                if name == args.labs[-1]:
                    named = time_to_name(lab, args.seed)
            finally:
                deploy.down(fabric.name)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## config-audit: its cost at rest and its delay (issue 31, {now[:10]})", "",
             f"`python bench/config_audit.py --labs {' '.join(args.labs)} --sweeps {args.sweeps} --seed {args.seed}` "
             f"on {machine()}, {now}. One sweep: every switch's bgpd running config (vty socket), the hash "
             "sysctl, one MTU ioctl per port of every node, the PFC controller's ECN marking and queue "
             "classes, every switch's LLDP neighbours (lldpd's client library on its socket). Median of "
             f"{args.sweeps} sweeps (CPU: this process and any it runs); none found anything on "
             "the healthy labs.", "",
             "| lab | switches / nodes | wall ms / sweep | CPU ms / sweep | CPU ms / switch | CPU ms / node | "
             "sweep every s | a core at rest |", "| --- |" + " --- |" * 7, *costs, "",
             f"LLDP at rest (lldpd on every node, one frame per port a second; {args.lldp_window:.0f} s "
             "sampled): the bring-up phase that starts it, memory (PSS, lldpd and its unprivileged child) per "
             "node, and the share of one core all of them take.", "",
             "| lab | nodes | started in s | MB per node | a core at rest |", "| --- | --- | --- | --- | --- |",
             *lldp_rows, "",
             f"Time to name on {args.labs[-1]}, sweeping back to back from the injection (the detector's own "
             f"delay; a live run adds up to one sweep interval): each kind of training level 4, drawn by the kind "
             f"(seed {args.seed}).", "", "| kind | target | named after s |", "| --- | --- | --- |",
             *[f"| {kind} | {target} | {took:.3f} |" for kind, target, took in named], ""]
    emit(lines, args.out, BEGIN, END)


if __name__ == "__main__":
    main()
