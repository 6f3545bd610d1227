"""Benchmark: what the ports' physical layer costs per packet (issue 36).

    python bench/phy_cost.py --out docs/benchmarks.md

The physical layer (twin/lab/ebpf/phy.bpf.c, lab/ports/phy.py) runs on every fabric port of every lab,
`receive` on the ingress and `transmit` on the egress, healthy or not: each packet crossing a
link pays both once. Runs the compiled programs on one 100-byte frame with BPF_PROG_TEST_RUN,
`--repeat` times per case, in the kernel, no lab needed; the kernel reports the mean time per run.
Median of `--rounds`.
"""

from __future__ import annotations

import argparse
import datetime
import socket
import statistics
import struct
import sys
from ipaddress import IPv4Network
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

from twin.lab.ebpf import layout  # noqa: E402
from twin.lab.ebpf.frames import ipv4_udp, loopback_phy  # noqa: E402
from twin.lab.ebpf.libbpf import run_on_packet, update  # noqa: E402
from twin.lab.ports import phy  # noqa: E402

BEGIN, END = "<!-- phy-cost:begin -->", "<!-- phy-cost:end -->"
ZERO = struct.pack("<I", 0)


def configure(obj, fault: dict, holes: int, faulty_elsewhere: bool) -> None:
    """The port's element, and the lab's counts as lab/ports/phy.py keeps them."""
    update(obj.map_fd("phy_faults"), ZERO, phy.FAULT.pack(*(phy.HEALTHY | fault).values()))
    faulty = int(bool(fault.get("drop") or fault.get("corrupt")) or faulty_elsewhere)
    update(obj.map_fd("phy_settings"), ZERO, phy.SETTINGS.pack(holes, faulty, 0, 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cases = {  # name: (program, this port's fault, black holes in the lab, a faulty port elsewhere)
        "receive, nothing wrong in the lab (the common case)": ("receive", {}, 0, False),
        "receive, a healthy port, a fault elsewhere in the lab": ("receive", {}, 0, True),
        "receive, a silent drop drawn, not dropped (1 ppm)": ("receive", {"drop": 1, "drop_flows": phy.ONE}, 0, False),
        "receive, a silent drop of some flows, this one not hit": ("receive", {"drop": phy.ONE, "drop_flows": 0}, 0,
                                                                   False),
        "receive, bit errors drawn, not damaged (1 ppm)": ("receive", {"corrupt": 1}, 0, False),
        "receive, dropped (100 %)": ("receive", {"drop": phy.ONE, "drop_flows": phy.ONE}, 0, False),
        "receive, a black hole elsewhere in the lab (trie read)": ("receive", {}, 1, False),
        "transmit, no swapped cable in the lab": ("transmit", {}, 0, False),
    }
    with loopback_phy(phy.OBJECT) as obj:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            cookie = layout.netns_cookie(sock)
        # a black hole toward another prefix, so the trie is read and misses
        update(obj.map_fd("phy_blackholes"), phy._hole_key(cookie, IPv4Network("10.9.0.0/31")), struct.pack("<Q", 0))
        rows = []
        for name, (program, fault, holes, elsewhere) in cases.items():
            configure(obj, fault, holes, elsewhere)
            fd = obj.program_fd(program)
            rows.append((name, statistics.median(run_on_packet(fd, ipv4_udp(0), args.repeat)[2]
                                                 for _ in range(args.rounds))))
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## What the ports' physical layer costs per packet (issue 36, {now[:10]})", "",
             f"`python bench/phy_cost.py --repeat {args.repeat} --rounds {args.rounds}` on {machine()}, {now}. "
             f"The programs every fabric port runs (`receive` on its ingress, `transmit` on its egress) on a 100-byte "
             f"frame, BPF_PROG_TEST_RUN, the kernel's mean ns per run (median of {args.rounds} rounds of "
             f"{args.repeat:,} runs):", "",
             "| case | ns per packet |", "| --- | --- |", *[f"| {name} | {ns:.0f} |" for name, ns in rows], "",
             "A packet crossing one link pays one transmit and one receive; a jumbo frame at 100 Mbit/s takes "
             "720 us on the wire.", ""]
    emit(lines, args.out, BEGIN, END)


if __name__ == "__main__":
    main()
