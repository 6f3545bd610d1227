"""Benchmark: a link failure seen from above and from below (issue 30). Baidu's AIPod: adaptive
routing repairs uplink failures in milliseconds, while downlink failures wait for routing.

    python bench/uplink_downlink.py --runs 3 --out docs/benchmarks.md

One cable, two kinds of failure. When the link between a leaf and a spine goes down, a stream
going up through it fails on its uplink: the leaf that loses the port is the one choosing among
its uplinks, and can choose another at once. A stream coming down through it fails on its
downlink: the spine has no other way down to that leaf, and the leaf far away that chose the
spine does not know; it learns from routing (BGP withdrawing the leaf's prefixes at the spine).

On copies of rail4 (200 Mbit/s), one balancing by ECMP with RC QPs (go-back-N) and one spraying
every packet with multipath QPs (selective repeat, roce/selective.py): one RoCE stream at line
rate (the incast driver with one sender, DCQCN on) from a rail-1 NIC under leaf-g1-r1 to one under
leaf-g2-r1 (up), or the other way (down). After WARMUP_S the link between leaf-g1-r1 and the spine
that carries most of the stream goes down (`link_down`, both ends) until the stream ends; the
other spine can carry the whole line rate, so a perfect fabric shows no dip at all. Per run, from
the receiver's in-order bytes every 100 ms: the rate before the cut; the worst 100 ms after it
against that rate; line time lost (the bytes short of that rate over the AFTER_S after the cut, in
ms at line rate); the outage (the 100 ms intervals after the cut below half that rate, summed);
and what the transport did (retransmitted packets, timeouts, tail loss probes). Between runs the
link comes back and the lab converges again. Rewrites the "uplink-downlink" section of the file.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from twin.collectives.incast import SAMPLE_S, roce_incast
from twin.faults import engine
from twin.faults.base import FaultContext
from twin.lab import deploy
from twin.lab.files import open_lab
from twin.lab.ports.counters import CounterReader
from twin.model.balance import uplinks
from twin.model.nics import fabric_nics
from twin.model.ports import peer
from twin.progress import NullProgress

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

BEGIN, END = "<!-- uplink-downlink:begin -->", "<!-- uplink-downlink:end -->"
LEAF, FAR_LEAF = "leaf-g1-r1", "leaf-g2-r1"
FABRICS = (("ecmp", False, "RC (go-back-N)"), ("packet", True, "multipath (selective repeat)"))
WARMUP_S = 3.0  # the stream at full rate before the cut
AFTER_S = 6.0  # the stream after it: longer than RC's first retransmission timeout (4.3 s)
WATCH_S = 0.5  # counters read over this long to find the spine carrying the stream
OUTAGE = 0.5  # a 100 ms below this share of the rate before the cut is part of the outage


def stream_ends(lab, direction: str):
    """(sender, receiver) host NICs on rail 1: up leaves leaf-g1-r1 by its uplinks, down arrives there."""
    nics = {nic.leaf: nic for nic in sorted(fabric_nics(lab.fabric), key=lambda n: n.host) if nic.rail == 1}
    near, far = nics[LEAF], nics[FAR_LEAF]
    return (near, far) if direction == "up" else (far, near)


def busiest_uplink(lab, direction: str) -> str:
    """The link from leaf-g1-r1 to the spine that carries most of the stream now (its tx bytes up,
    its rx bytes down), as `leaf -- spine`."""
    counter = "tx_bytes" if direction == "up" else "rx_bytes"
    ports = uplinks(lab.fabric, LEAF)
    with CounterReader(lab) as reader:
        before = reader.read(checksums=False).interfaces
        time.sleep(WATCH_S)
        after = reader.read(checksums=False).interfaces
    port = max(ports, key=lambda p: after[(p.node, p.ifname)][counter] - before[(p.node, p.ifname)][counter])
    return f"{LEAF} -- {peer(lab.fabric, port).node}"


def one_run(lab, direction: str, multipath: bool) -> dict:
    sender, receiver = stream_ends(lab, direction)
    ctx, cut = FaultContext(lab), {}

    def cut_link() -> None:
        time.sleep(WARMUP_S - WATCH_S - 0.2)
        link = busiest_uplink(lab, direction)
        timing, params = engine.parse({"id": "cut", "kind": "link_down", "link": link})
        cut["at"] = time.monotonic()
        engine.inject(ctx, timing, params)
        cut["link"] = link

    cutter = threading.Thread(target=cut_link, daemon=True)
    try:
        cutter.start()
        result = roce_incast(lab, [sender], receiver, WARMUP_S + AFTER_S, cc="dcqcn", multipath=multipath)
        cutter.join()
    finally:
        if any(f["id"] == "cut" for f in lab.state.faults):
            engine.clear(ctx, "cut")
    if "link" not in cut:
        raise SystemExit(f"the link was not cut in the {direction} run")
    received = [sum(sample) for sample in result.received]
    per_sample = [b - a for a, b in zip(received, received[1:])]  # bytes in each SAMPLE_S after the first
    cut_index = int((cut["at"] - result.started) / SAMPLE_S)  # the sample interval the cut fell in
    before = statistics.fmean(per_sample[max(0, cut_index - 15):cut_index - 1])
    after = per_sample[cut_index:cut_index + int(AFTER_S / SAMPLE_S)]
    short = sum(max(0.0, before - got) for got in after)
    outage = sum(1 for got in after if got < OUTAGE * before)
    line_bytes_per_ms = lab.fabric.rate_bps / 8 / 1000
    return {"direction": direction, "link": cut["link"],
            "before_line": round(before * 8 / SAMPLE_S / lab.fabric.rate_bps, 3),
            "worst": round(min(after) / before, 2) if after and before else None,
            "lost_ms": round(short / line_bytes_per_ms, 1),
            "outage_s": round(outage * SAMPLE_S, 1),
            **{k: result.stats.get(k, 0) for k in ("retrans_packets", "timeouts", "tail_probes")}}


def bench_fabric(mode: str, multipath: bool, runs: int, folder: Path) -> list[dict]:
    path = lab_copy("rail4", f"ud{mode[:3]}", folder, routing={"load_balance": mode})
    lab_file, fabric = open_lab(str(path))
    lab = deploy.up(lab_file, fabric, NullProgress(), timeout_s=180)
    rows = []
    try:
        for run in range(runs):
            for direction in ("up", "down"):
                row = {"fabric": mode, "multipath": multipath, **one_run(lab, direction, multipath)}
                print(f"{mode} run {run}: {row}", flush=True)
                rows.append(row)
                deploy.wait_converged(lab, timeout_s=120)
    finally:
        deploy.down(fabric.name)
    return rows


def render(rows: list[dict], command: str) -> list[str]:
    lines = [BEGIN, f"## An uplink failure against a downlink failure (issue 30, {datetime.date.today().isoformat()})",
             "", f"`{command}` on {machine()}.", "",
             f"rail4 at 200 Mbit/s: one RoCE stream at line rate (DCQCN on) between rail-1 NICs under {LEAF} and "
             f"{FAR_LEAF}, up (from {LEAF}: the cut is on the stream's uplink, where the leaf chooses) or down (to "
             f"{LEAF}: the cut is on its downlink, below a spine the far leaf chose). After {WARMUP_S:g} s the link "
             f"from {LEAF} to the spine carrying most of the stream goes down (both ends). The other spine can carry "
             "the whole stream, so a perfect fabric shows no dip. Worst 100 ms: against the rate before the cut; "
             f"line time lost: bytes short of that rate over the {AFTER_S:g} s after the cut, in ms at line rate; "
             f"outage: the 100 ms intervals after the cut below {OUTAGE:g} of that rate, summed. One row per run. "
             "The RC timeout is NCCL's first at ib_timeout 20 (4.3 s).", "",
             "| fabric | transport | failure | link cut | rate before / line | worst 100 ms | line time lost | "
             "outage | resent | timeouts | tail probes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    transports = {mode: name for mode, _m, name in FABRICS}
    for direction in ("up", "down"):
        for r in (r for r in rows if r["direction"] == direction):
            failure = "uplink" if direction == "up" else "downlink"
            lines.append(f"| {r['fabric']} | {transports[r['fabric']]} | {failure} | {r['link']} | "
                         f"{r['before_line']:.2f} | {r['worst']:.2f} | {r['lost_ms']:g} ms | {r['outage_s']:g} s | "
                         f"{r['retrans_packets']} | {r['timeouts']} | {r['tail_probes']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fabrics", nargs="+", default=[f[0] for f in FABRICS], choices=[f[0] for f in FABRICS])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for mode, multipath, _name in FABRICS:
            if mode in args.fabrics:
                rows += bench_fabric(mode, multipath, args.runs, Path(folder))
    emit(render(rows, "python bench/uplink_downlink.py " + " ".join(sys.argv[1:])), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
