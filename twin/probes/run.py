"""Run the probe mesh for a fixed time and summarise it (`twin probe`, tests, benchmarks)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from twin.lab.handle import Lab
from twin.model.fabric import Fabric
from twin.probes.focus import TIMES as FOCUS_TIMES
from twin.probes.mesh import Interval, ProbeMesh
from twin.probes.pace import MIN_LINK_PPS
from twin.probes.selection import PATHS_PER_LINK
from twin.progress import NullProgress, Progress
from twin.signals import deferred_interrupts, sigterm_as_interrupt


def run_probe_mesh(lab: Lab, duration_s: float, interval_ms: int = 100,
                   pairs: str = "cover", progress: Progress | None = None, name: str = "cli",
                   during=None, paths_per_link: int = PATHS_PER_LINK, rtt_every: int = 1,
                   focus: int = FOCUS_TIMES, min_link_pps: int = MIN_LINK_PPS, max_pps: int | None = None) -> dict:
    """`during(mesh)`, if given, runs once paths are known (e.g. a test injecting a fault)."""
    progress = progress or NullProgress()
    progress.phase("planning probes", None)
    mesh = ProbeMesh(lab, name, pairs, interval_ms, paths_per_link=paths_per_link, rtt_every=rtt_every, focus=focus,
                     min_link_pps=min_link_pps, max_pps=max_pps)
    mesh.keep_logs = lab.paths.root / "logs" / f"probes-{name}"  # until `twin lab down`, past the mesh's end
    intervals: list[Interval] = []
    mesh.listeners.append(intervals.append)
    progress.phase("discovering paths", None)
    # SIGTERM like Ctrl-C: the agents are stopped by pid on the way out, never left running
    with sigterm_as_interrupt(), _stopping(mesh) as stats:
        mesh.start()
        mesh.wait_for_paths()
        started = time.monotonic()
        if during:
            during(mesh)
        progress.phase(f"probing {duration_s:g} s", int(duration_s))
        shown = 0
        while time.monotonic() - started < duration_s:
            time.sleep(0.2)
            elapsed = int(time.monotonic() - started)
            if elapsed > shown:
                progress.advance(elapsed - shown)
                shown = elapsed
        probing_s = time.monotonic() - started
    return summarise(mesh, lab.fabric, intervals, stats, probing_s)


@contextmanager
def _stopping(mesh: ProbeMesh) -> Iterator[dict]:
    """The mesh's agents' stats, filled in when the block ends; the mesh stopped however it ends
    (a second signal during the stop waits until it is done)."""
    stats: dict = {}
    try:
        yield stats
    finally:
        with deferred_interrupts():
            stats.update(mesh.stop())


def summarise(mesh: ProbeMesh, fabric: Fabric, intervals: list[Interval], stats: dict, probing_s: float) -> dict:
    totals: dict[tuple, dict] = defaultdict(lambda: {"sent": 0, "lost": 0, "rtt50": [], "rtt99": []})
    for interval in intervals:
        for s in interval.samples:
            row = totals[(s.src, s.dst, s.sport)]
            row["sent"] += s.sent
            row["lost"] += s.lost
            row["links"] = s.links
            if s.rtt_p50_ms is not None:
                row["rtt50"].append(s.rtt_p50_ms)
                row["rtt99"].append(s.rtt_p99_ms)
    lossy = [{"src": k[0], "dst": k[1], "sport": k[2], "sent": v["sent"], "lost": v["lost"],
              "rtt_p50_ms": statistics.median(v["rtt50"]) if v["rtt50"] else None,
              "rtt_p99_ms": max(v["rtt99"]) if v["rtt99"] else None, "links": list(v.get("links", ()))}
             for k, v in sorted(totals.items()) if v["lost"]]
    sent_total = sum(v["sent"] for v in totals.values())
    cpu_s = round(sum(s.get("stop_cpu_s", 0.0) for s in stats.values()), 3)
    all50 = [x for v in totals.values() for x in v["rtt50"]]
    all99 = [x for v in totals.values() for x in v["rtt99"]]
    return {
        "load": mesh.load, "coverage": mesh.selected(), "pairs": len(mesh.plans),
        "paths": sum(len(v) for v in mesh.active.values()),
        "probing_s": round(probing_s, 2), "sent": sent_total,
        "lost": sum(v["lost"] for v in totals.values()),
        "achieved_pps": _achieved_pps(intervals, mesh.report_ms / 1000),
        "cpu_s": cpu_s,
        "uncovered": sorted({link.name for link in fabric.links} - mesh.covered_links()),
        "unresolved_hops": sum(1 for links in mesh.paths.values() for link in links if link is None),
        "rtt_p50_ms": statistics.median(all50) if all50 else None,
        "rtt_p99_ms": statistics.quantiles(all99, n=100)[98] if len(all99) > 1 else None,
        "lossy_paths": lossy,
    }


def _achieved_pps(intervals: list[Interval], report_s: float) -> float:
    """Probes sent per second over the whole intervals (the first and last are partial)."""
    whole = intervals[1:-1]
    return round(sum(s.sent for i in whole for s in i.samples) / (len(whole) * report_s), 1) if whole else 0.0
