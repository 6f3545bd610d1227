"""Benchmark: a lab split over machines that runs (issue 32, item 4). On one box, each machine is a
network namespace holding its underlay address, all of them on one bridge (an underlay switch);
every machine's share comes up at once (`twin lab up LAB --machines N --machine K --address ...
--underlay NS`), then one link that crosses machines is cut at one end and the time until the far
machine's switch withdraws its routes through it is measured; then every share goes down.

    python bench/split.py --labs rail8 pod64 --machines 2 4 --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

from lab_lifecycle import machine
from sections import emit

from twin.lab.files import open_lab
from twin.lab.handle import Lab
from twin.lab.kernel.vxlan import VXLAN_OVERHEAD, seam_ends
from twin.lab.routing.converge import kernel_next_hops
from twin.lab.runtime.netns import NETNS_DIR, namespace_prefix
from twin.lab.state import lab_dir

BEGIN, END = "<!-- split:begin -->", "<!-- split:end -->"
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]
HUB = "ftb-split-hub"  # the underlay switch: a bridge in a namespace of its own
ROOT = Path(__file__).resolve().parents[1]


def ns(name: str, *argv: str) -> None:
    subprocess.run(["ip", "-n", name, *argv], check=True)


def make_underlay(count: int, mtu: int) -> list[str]:
    """`count` machine namespaces, each with 10.250.0.k on a veth to the hub's bridge."""
    subprocess.run(["ip", "netns", "add", HUB], check=True)
    ns(HUB, "link", "add", "br0", "mtu", str(mtu), "type", "bridge")
    ns(HUB, "link", "set", "br0", "up")
    addresses = []
    for k in range(1, count + 1):
        name = f"ftb-split-m{k}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        ns(HUB, "link", "add", f"m{k}", "mtu", str(mtu), "type", "veth", "peer", "name", "u0", "netns", name,
           "mtu", str(mtu))
        ns(HUB, "link", "set", f"m{k}", "master", "br0", "up")
        ns(name, "addr", "add", f"10.250.0.{k}/24", "dev", "u0")
        ns(name, "link", "set", "u0", "up")
        addresses.append(f"10.250.0.{k}")
    return addresses


def remove_underlay(count: int) -> None:
    for name in [HUB, *(f"ftb-split-m{k}" for k in range(1, count + 1))]:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def leftovers(share: str) -> list[str]:
    found = [n for n in os.listdir(NETNS_DIR) if n.startswith(namespace_prefix(share))]
    return found + ([str(lab_dir(share))] if lab_dir(share).exists() else [])


def run_once(lab: str, count: int, timeout_s: float) -> dict:
    fabric = open_lab(lab)[1]
    addresses = make_underlay(count, fabric.mtu + VXLAN_OVERHEAD)
    shares = [f"{lab}-m{k}" for k in range(1, count + 1)]
    try:
        start = time.monotonic()
        procs = [subprocess.Popen([*TWIN, "lab", "up", lab, "--machines", str(count), "--machine", str(k),
                                   "--address", ",".join(addresses), "--underlay", f"ftb-split-m{k}",
                                   "--timeout", str(timeout_s)], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for k in range(1, count + 1)]
        ended = []
        for proc in procs:
            output = proc.communicate()[0]
            ended.append(time.monotonic() - start)
            if proc.returncode != 0:
                raise SystemExit(f"{lab} over {count}: a share failed:\n{output[-3000:]}")
        labs = [Lab.open(name) for name in shares]
        reroute_s, cut = cut_crossing_link(labs)
        start = time.monotonic()
        for name in shares:
            subprocess.run([*TWIN, "lab", "down", name], check=True, capture_output=True)
        down_s = time.monotonic() - start
        left = [item for name in shares for item in leftovers(name)]
        return {"lab": lab, "machines": count, "switches": [len(x.fabric.local_switches) for x in labs],
                "seam": [len(x.fabric.seam_links) for x in labs], "up_s": max(ended),
                "phases": labs[0].state.timings_s, "reroute_s": reroute_s, "cut": cut, "down_s": down_s,
                "left": left, "bfd": f"{fabric.bfd_interval_ms} ms x {fabric.bfd_multiplier}"}
    finally:
        for name in shares:
            subprocess.run([*TWIN, "lab", "down", name], capture_output=True)
        remove_underlay(count)


def cut_crossing_link(labs: list[Lab]) -> tuple[float, str]:
    """Down machine 1's end of its first switch link to another machine (what link_down does on a
    crossing link); seconds until that switch's kernel holds fewer next hops."""
    here = labs[0]
    end = next(e for e in seam_ends(here.fabric) if e.link.kind == "fabric")  # switch to switch: BFD guards it
    far = end.link.peer(end.end.node)
    there = labs[end.remote_machine]
    before = sum(kernel_next_hops(there, far.node).values())
    start = time.monotonic()
    subprocess.run(["ip", "-n", here.runtime.resource_name(end.end.node), "link", "set", end.end.ifname, "down"],
                   check=True)
    while sum(kernel_next_hops(there, far.node).values()) >= before:
        if time.monotonic() - start > 30:
            return float("nan"), end.link.name
        time.sleep(0.01)
    return time.monotonic() - start, end.link.name


def render(rows: list[dict], command: str) -> list[str]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, "## A split lab (issue 32, item 4)", "", f"Measured {now} on {machine()}.",
             f"Command: `{command}`.", "",
             "Each machine is a network namespace holding its underlay address, all on one bridge (MTU the "
             "lab's plus 50); every share starts at once on this one 2-core box, so the machines share its "
             "CPU. Up: until the last share has converged (its switches' ECMP next hops, its hosts' sampled "
             "pairs). Reroute: machine 1's end of a crossing link set down, until the far machine's switch "
             "has fewer next hops (its BFD detection). Left: namespaces and run directories after every "
             "share's `twin lab down`. A share is lossy (no PFC controller, as in an export), so its bring-up "
             "skips the queue programs a whole lab loads; the probe mesh is refused on a share (each host's "
             "agent counts what it receives, and those counts are on the other machines), so it is not run "
             "across the seam here.", "",
             "| lab | machines | switches per machine | VXLAN links per machine | BFD | up (all converged) "
             "| cut link | reroute at the far end | down (all) | left |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['lab']} | {r['machines']} | {', '.join(map(str, r['switches']))} "
                     f"| {', '.join(map(str, r['seam']))} | {r['bfd']} | {r['up_s']:.1f} s | {r['cut']} "
                     f"| {r['reroute_s']:.2f} s | {r['down_s']:.1f} s | {len(r['left'])} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="+", default=["rail8", "pod64"])
    parser.add_argument("--machines", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for lab in args.labs:
        for count in args.machines:
            row = run_once(lab, count, args.timeout)
            print(f"{lab} over {count}: up {row['up_s']:.1f} s, reroute {row['reroute_s']:.2f} s, down "
                  f"{row['down_s']:.1f} s, left {row['left']}", flush=True)
            rows.append(row)
    emit(render(rows, "make bench  # " + " ".join(sys.argv)), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
