"""Benchmark: BFD at FRR's default timers at scale, each switch's bfdd sending its own packets
against the lab's BFD data plane (routing.bfd.offload): bring-up, the lab at rest, what a BFD
packet costs, and how long `twin lab status` takes to answer (issue 32).

    python bench/bfd_offload.py --labs pod64 pod128 --interval-ms 300 --out docs/benchmarks.md

Each lab comes up once per mode from a copy of its file with only `routing.bfd` changed. The cost
per packet is the BFD processes' CPU at rest divided by the packets they send (every session sends
one per interval and receives one; reception is in the figure, as in lab/idle.py).
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab_copy import lab_copy
from lab_lifecycle import machine
from sections import emit

from twin.lab import capacity, deploy, idle
from twin.lab.bfd import client as bfd_client
from twin.lab.files import open_lab
from twin.progress import NullProgress

REST_SETTLE_S, REST_WINDOW_S = 10.0, 20.0
BEGIN, END = "<!-- bfd-offload:begin -->", "<!-- bfd-offload:end -->"
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]


def run_once(lab_file: Path, timeout_s: float) -> dict:
    lab_spec, fabric = open_lab(str(lab_file))
    refused = capacity.refusal(fabric)
    if refused is not None:  # what `twin lab up` says, from the measured costs
        return {"lab": fabric.name, "mode": "data plane" if fabric.bfd_offload else "bfdd",
                "bfd": f"{fabric.bfd_interval_ms} ms x {fabric.bfd_multiplier}", "sessions": idle.bfd_sessions(fabric),
                "refused": refused.message}
    start = time.monotonic()
    lab = deploy.up(lab_spec, fabric, NullProgress(), timeout_s=timeout_s)
    up_s = time.monotonic() - start
    try:
        time.sleep(REST_SETTLE_S)
        before = bfd_client.stats_after(lab, time.monotonic()) if fabric.bfd_offload else None
        rest = idle.measure(lab.state, REST_WINDOW_S)
        after = bfd_client.stats_after(lab, time.monotonic()) if fabric.bfd_offload else None
        start = time.monotonic()
        status = subprocess.run([*TWIN, "lab", "status", fabric.name, "--idle-window", "0"], capture_output=True,
                                text=True, timeout=600)
        status_s = time.monotonic() - start
        if status.returncode != 0:
            print(status.stdout[-2000:], status.stderr[-2000:], flush=True)
    finally:
        deploy.down(fabric.name)
    sessions = idle.bfd_sessions(fabric)
    if fabric.bfd_offload:
        bfd_cores = rest.by_program.get(bfd_client.RESOURCE, 0.0)
        sent_per_s = (after["tx_packets"] - before["tx_packets"]) / (after["t_mono"] - before["t_mono"])
    else:
        bfd_cores = rest.by_program.get("bfdd", 0.0)
        sent_per_s = sessions * 1000.0 / fabric.bfd_interval_ms / 0.875  # jitter: 75-100 % of the interval
    return {"lab": fabric.name, "mode": "data plane" if fabric.bfd_offload else "bfdd",
            "switches": len(fabric.switches),
            "sessions": sessions, "bfd": f"{fabric.bfd_interval_ms} ms x {fabric.bfd_multiplier}", "up_s": up_s,
            "bfd_cores": bfd_cores, "per_packet_us": 1e6 * bfd_cores / sent_per_s if sent_per_s else 0.0,
            "sent_per_s": sent_per_s, "rest_cores": rest.cores, "machine": rest.machine_busy_cores,
            "programs": rest.by_program, "status_s": status_s, "status_rc": status.returncode}


def render(rows: list[dict], command: str) -> list[str]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, "## BFD data plane (issue 32)", "", f"Measured {now} on {machine()}.", f"Command: `{command}`.",
             "", "Each lab once per mode, from a copy of its file with `routing.bfd` changed only. At rest: "
             f"{REST_SETTLE_S:.0f} s after convergence, over {REST_WINDOW_S:.0f} s. BFD cores: bfdd's "
             "processes, or the data plane's one; per packet: those cores over the packets sent a second "
             "(each also received once). `twin lab status`: wall time to answer, and its exit code.", "",
             "| lab | BFD | mode | up to converged | BFD sessions | BFD packets sent/s | BFD cores | CPU per "
             "packet | lab processes at rest | machine busy | twin lab status |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if "refused" in row:
            lines.append(f"| {row['lab']} | {row['bfd']} | {row['mode']} | refused by `twin lab up`: "
                         f"{row['refused'].split(': ', 1)[-1]} | {row['sessions']} | | | | | | |")
            continue
        lines.append(f"| {row['lab']} | {row['bfd']} | {row['mode']} | {row['up_s']:.1f} s | {row['sessions']} "
                     f"| {row['sent_per_s']:.0f} | {row['bfd_cores']:.2f} | {row['per_packet_us']:.0f} us "
                     f"| {row['rest_cores']:.2f} | {row['machine']:.2f} | {row['status_s']:.1f} s "
                     f"(exit {row['status_rc']}) |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labs", nargs="+", default=["pod64", "pod128"])
    parser.add_argument("--interval-ms", type=int, default=300)
    parser.add_argument("--modes", nargs="+", choices=["bfdd", "offload"], default=["bfdd", "offload"])
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to converge, per lab")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for ref in args.labs:
            for mode in args.modes:
                bfd = {"interval_ms": args.interval_ms, "multiplier": 3, "offload": mode == "offload"}
                row = run_once(lab_copy(ref, ref, Path(directory), routing={"bfd": bfd}), args.timeout)
                rows.append(row)
                if "refused" in row:
                    print(f"{ref} {mode}: {row['refused']}", flush=True)
                    continue
                print(f"{ref} {mode}: up {row['up_s']:.1f} s, BFD {row['bfd_cores']:.2f} cores "
                      f"({row['per_packet_us']:.0f} us a packet), at rest {row['rest_cores']:.2f}, status "
                      f"{row['status_s']:.1f} s; {row['programs']}", flush=True)
    emit(render(rows, "make bench  # " + " ".join(sys.argv)), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
