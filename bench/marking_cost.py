"""Benchmark: what the queue programs cost per packet, with and without ECN marking (issue 29).

    python bench/marking_cost.py --out docs/benchmarks.md

Runs the compiled enqueue program (twin/lab/ebpf/queues.bpf.c) on one 100-byte frame with
BPF_PROG_TEST_RUN, `--repeat` times per case, in the kernel, no lab needed; the kernel reports
the mean time per run. Cases: counting only (marking off), the queue above Kmin with the marking
chance drawn (nothing marked), above Kmax for a packet that is not ECN-capable (the header read),
and the mark itself (ECN-capable above Kmax: the TOS byte and the IP checksum rewritten), which
a repeat cannot measure (the first run marks, the rest see CE), so it is run once per call and
set against the same single-run call on a packet that is not ECN-capable. Median of `--rounds`.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

from twin.lab.ebpf import layout  # noqa: E402
from twin.lab.ebpf.frames import CE, ECT0, ipv4_udp, loopback_queue  # noqa: E402
from twin.lab.ebpf.libbpf import run_on_packet  # noqa: E402

BEGIN, END = "<!-- marking-cost:begin -->", "<!-- marking-cost:end -->"
HIGH = 1 << 31  # a threshold no queue reaches


def configure(state, kmin: int, kmax: int, pmax: float) -> None:
    struct.pack_into("<qIII", state, 0, 0, 0, 0, 0)  # occupancy, phase, no XOFF: marking only
    struct.pack_into("<III", state, layout.OFFSET["kmin"], kmin, kmax, round(pmax * layout.PROBABILITY_ONE))


def repeated(obj, state, kmin: int, kmax: int, pmax: float, tos: int, repeat: int) -> float:
    configure(state, kmin, kmax, pmax)
    return run_on_packet(obj.program_fd("enqueue"), ipv4_udp(tos), repeat)[2]


def single_runs(obj, state, tos: int, calls: int) -> float:
    """The median of `calls` one-run calls above Kmax (each starts from an empty count)."""
    times = []
    for _ in range(calls):
        configure(state, 1, 2, 0.1)
        times.append(run_on_packet(obj.program_fd("enqueue"), ipv4_udp(tos), 1)[2])
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cases = {
        "counting only (marking off)": (0, 0, 0.0, ECT0),
        "above Kmin, chance drawn, not marked": (1, HIGH, 0.0, ECT0),
        "above Kmax, not ECN-capable (header read)": (1, 2, 0.1, 0x00),
        "above Kmax, CE already (header read)": (1, 2, 0.1, CE),
    }
    with loopback_queue() as (obj, state):
        rows = [(name, statistics.median(repeated(obj, state, *case, args.repeat) for _ in range(args.rounds)))
                for name, case in cases.items()]
        unmarked, marked = single_runs(obj, state, 0x00, args.calls), single_runs(obj, state, ECT0, args.calls)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## What the queue programs cost per packet (issue 29, {now[:10]})", "",
             f"`python bench/marking_cost.py --repeat {args.repeat} --rounds {args.rounds} --calls {args.calls}` on "
             f"{machine()}, {now}. The enqueue program on a 100-byte frame, BPF_PROG_TEST_RUN, the kernel's mean ns "
             f"per run (median of {args.rounds} rounds of {args.repeat:,} runs):", "",
             "| case | ns per packet |", "| --- | --- |", *[f"| {name} | {ns:.0f} |" for name, ns in rows], "",
             f"The mark itself (TOS byte and IP checksum rewritten), one run per call, median of {args.calls:,} calls: "
             f"{marked:.0f} ns against {unmarked:.0f} ns for a packet that is not ECN-capable, so a mark adds about "
             f"{max(0.0, marked - unmarked):.0f} ns. A jumbo frame at 100 Mbit/s takes 720 us on the wire.", ""]
    emit(lines, args.out, BEGIN, END)


if __name__ == "__main__":
    main()
