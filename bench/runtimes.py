"""Benchmark: the docker runtime against the netns runtime on one lab.

    python bench/runtimes.py --lab rail4 --runs 3 --out docs/benchmarks.md

Per runtime: lab up to converged and down, the phase that creates the nodes, and memory per
node: the PSS of every process in the node's network namespace (FRR on switches, nothing on
idle hosts; the container's own `sleep` on docker), plus on docker the containerd shim each
container brings. Needs a Docker daemon and `make images`. Rewrites its own section.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

from lab_lifecycle import machine, pss_kib
from sections import write_section

from twin.lab import deploy
from twin.lab.files import open_lab
from twin.lab.kernel.nsutil import pids_in_netns
from twin.lab.runtime.docker import DockerRuntime
from twin.progress import NullProgress

BEGIN, END = "<!-- runtimes:begin -->", "<!-- runtimes:end -->"


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def node_memory_mib(runtime, fabric) -> dict[str, list[float]]:
    memory: dict[str, list[float]] = {"switch": [], "host": [], "shim": []}
    for node in fabric.nodes.values():
        pids = pids_in_netns(runtime.netns_path(node.name))
        memory["switch" if node.is_switch else "host"].append(sum(pss_kib(p) for p in pids) / 1024)
        if isinstance(runtime, DockerRuntime):
            memory["shim"].append(pss_kib(parent(runtime.container_pid(node.name))) / 1024)
    return memory


def run_once(ref: str, kind: str) -> dict:
    lab_file, fabric = open_lab(ref)
    fabric = fabric.with_runtime(kind)
    start = time.monotonic()
    lab = deploy.up(lab_file, fabric, NullProgress(), timeout_s=120)
    up_s = time.monotonic() - start
    memory = node_memory_mib(lab.runtime, fabric)
    start = time.monotonic()
    deploy.down(fabric.name)
    return {"up_s": up_s, "down_s": time.monotonic() - start, "nodes_s": lab.state.timings_s["namespaces"],
            "nodes": len(fabric.nodes), "memory": memory}


def render(lab: str, results: dict[str, list[dict]], runs: int, command: str) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, "## Runtimes: docker against netns (issue 6)", "",
             f"Measured {now} on {machine()}.", f"Command: `{command}` ({runs} runs each; median, max).", "",
             f"| {lab} on | up to converged | creating the nodes | down | per switch (mean) | per host (mean) "
             "| containerd shim per node |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for kind, rows in results.items():
        ups, downs, nodes = ([r[k] for r in rows] for k in ("up_s", "down_s", "nodes_s"))

        def mean(part: str, rows: list = rows) -> str:
            values = [v for r in rows for v in r["memory"][part]]
            return f"{statistics.mean(values):.1f} MiB" if values else "-"
        lines.append(f"| {kind} ({rows[0]['nodes']} nodes) | {statistics.median(ups):.1f} s, {max(ups):.1f} s "
                     f"| {statistics.median(nodes):.2f} s | {statistics.median(downs):.2f} s "
                     f"| {mean('switch')} | {mean('host')} | {mean('shim')} |")
    lines += ["", "Memory is PSS of the processes in the node (FRR's four daemons on a switch; an idle host "
              "runs nothing on netns and only the container's `sleep` on docker).", END]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lab", default="rail4")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    for run in range(args.runs):
        for kind in ("netns", "docker"):
            row = run_once(args.lab, kind)
            results.setdefault(kind, []).append(row)
            print(f"{kind} run {run + 1}: up {row['up_s']:.1f} s (nodes {row['nodes_s']:.2f} s), "
                  f"down {row['down_s']:.2f} s", flush=True)
    write_section(args.out, BEGIN, END, render(args.lab, results, args.runs, "make bench  # " + " ".join(sys.argv)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
