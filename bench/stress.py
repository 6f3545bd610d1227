"""Benchmark: lossless under stress (issue 29). A fabric that promises no loss must keep it while
the machine is busy with other work.

    python bench/stress.py --incasts 5 --out docs/benchmarks.md

On mini with PFC alone (marking off: the queues are held by pauses, the hardest case for the
controller), a TCP incast of three senders with four flows each into one NIC, `--incasts` times,
under each load:
- quiet: nothing else runs;
- cpu: two busy loops, one per core, at the incast's own priority;
- churn: another lab (a copy of rail4) brought up and taken down again and again: namespaces,
  veths, qdiscs and routes created and deleted, which holds the kernel's rtnl lock, the lock every
  gate change (a TBF change over netlink) also takes;
- ci: the unit tests on two pytest-xdist workers (what `make test` puts beside the lab tests) and
  the churn at once;
- starved: three busy loops (one more than this machine's cores) beside a loop creating and
  deleting 100 veth pairs in a namespace of its own: the rtnl lock held by a process the loops
  keep off the CPU, the condition that once held a gate change for 235 ms.
Per load: packets dropped by any queue, pauses, the controller's reaction (kernel event to gate
message sent: p50, p99, max), its count corrections and lost ring events, its longest turn, the
packets held above a queue's buffer while a pause was late, and how busy the cores were. A fresh
lab per load, so the controller's figures are that load's.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from lossless import busy, cpu_times  # noqa: E402
from sections import emit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- stress:begin -->", "<!-- stress:end -->"
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]
LOADS = ("quiet", "cpu", "churn", "ci", "starved")
VETH_NAMESPACE = "bench-stress-veths"  # the starved load's, created and removed by this benchmark
SECONDS = 4.0


def churn_lab(folder: Path) -> Path:
    return lab_copy("rail4", "churn", folder)


def start_load(load: str, folder: Path) -> list[subprocess.Popen]:
    procs = []
    if load == "cpu":
        procs += [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                  for _ in range(os.cpu_count() or 2)]
    if load in ("churn", "ci"):
        lab = churn_lab(folder)
        loop = f"while true; do {' '.join(TWIN[:2])} '{TWIN[2]}' lab up {lab} >/dev/null 2>&1; " \
               f"{' '.join(TWIN[:2])} '{TWIN[2]}' lab down churn >/dev/null 2>&1; done"
        procs.append(subprocess.Popen(["bash", "-c", loop], start_new_session=True))
    if load == "starved":
        procs += [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                  for _ in range((os.cpu_count() or 2) + 1)]
        subprocess.run(["ip", "netns", "add", VETH_NAMESPACE], check=True)
        add = "".join(f"link add c{i} type veth peer name d{i}\n" for i in range(100))
        delete = "".join(f"link del c{i}\n" for i in range(100))
        loop = f"while true; do printf '{add}' | ip -n {VETH_NAMESPACE} -batch - 2>/dev/null; " \
               f"printf '{delete}' | ip -n {VETH_NAMESPACE} -batch - 2>/dev/null; done"
        procs.append(subprocess.Popen(["bash", "-c", loop], start_new_session=True))
    if load == "ci":
        procs.append(subprocess.Popen([str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-n", "2", "-m", "not integration",
                                       "-p", "no:cacheprovider", str(ROOT / "tests" / "unit")], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    return procs


def stop_load(procs: list[subprocess.Popen]) -> None:
    for proc in procs:  # each leads a session of its own: the loop's twin commands and pytest's workers go too
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    subprocess.run([*TWIN, "lab", "down", "churn"], capture_output=True)
    subprocess.run(["ip", "netns", "del", VETH_NAMESPACE], capture_output=True)  # its veths go with it


def measure(load: str, incasts: int, folder: Path) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from integration.helpers import marking

    from twin.lab import deploy
    from twin.lab.files import open_lab
    from twin.lab.pfc import published as pfc_counters
    from twin.lab.ports.counters import CounterReader
    from twin.lab.traffic import tcp_incast
    from twin.model.nics import fabric_nics

    lab_file, fabric = open_lab("mini")
    lab = deploy.up(lab_file, fabric)
    procs = start_load(load, folder)
    try:
        time.sleep(3)  # the load under way
        nics = {n.label: n for n in fabric_nics(fabric)}
        senders = [nics["host-g1-h2:nic1"], nics["host-g2-h1:nic1"], nics["host-g2-h2:nic1"]]
        drops = pauses = 0
        started = cpu_times()
        with CounterReader(lab) as reader, marking(lab, kmin=0):
            for _ in range(incasts):
                drops0 = sum(v.get("qdisc_drops", 0) for v in reader.read(checksums=False).interfaces.values())
                before = pfc_counters.ports(pfc_counters.read(lab.paths.root))
                tcp_incast(lab, senders, nics["host-g1-h1:nic1"], SECONDS, flows_per_sender=4)
                time.sleep(0.5)
                after = pfc_counters.ports(pfc_counters.read(lab.paths.root))
                drops += sum(v.get("qdisc_drops", 0) for v in reader.read(checksums=False).interfaces.values()) - drops0
                pauses += sum(c.rx_pause - before[k].rx_pause for k, c in after.items())
        cores = busy(started, cpu_times())
        controller = pfc_counters.read(lab.paths.root)["controller"]
        return {"load": load, "incasts": incasts, "drops": drops, "pauses": pauses, "reaction": controller["reaction"],
                "corrections": controller["count_corrections"], "lost": controller["lost_events"],
                "longest_turn_ms": controller["longest_turn_ms"], "late": controller.get("late_packets", 0),
                "cores": cores}
    finally:
        stop_load(procs)
        deploy.down(fabric.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--incasts", type=int, default=5)
    parser.add_argument("--loads", nargs="+", default=list(LOADS), choices=LOADS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for load in args.loads:
            print(f"{load} ...", flush=True)
            rows.append(measure(load, args.incasts, Path(scratch)))
            print(rows[-1], flush=True)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## Lossless under stress (issue 29, {now[:10]})", "",
             f"`python bench/stress.py --incasts {args.incasts}` on {machine()}, {now}. mini, PFC alone, "
             f"a 3:1 TCP incast (12 flows, {SECONDS:g} s) {args.incasts} times per load; reaction: kernel event "
             "to gate message, us; held late: packets that entered a queue above its buffer while a pause "
             "was late (held by the late allowance, model/buffers.py, not dropped).", "",
             "| load | incasts | queue drops | pauses | reaction p50 / p99 / max | count corrections | lost events | "
             "longest turn ms | held late | cores busy |", "| --- |" + " --- |" * 9]
    for r in rows:
        reaction = r["reaction"]
        lines.append(f"| {r['load']} | {r['incasts']} | {r['drops']} | {r['pauses']:,} "
                     f"| {reaction.get('p50_us', '-')} / {reaction.get('p99_us', '-')} / {reaction.get('max_us', '-')} "
                     f"| {r['corrections']} | {r['lost']} | "
                     f"{r['longest_turn_ms']} | {r['late']} | {r['cores']} |")
    emit(lines + [""], args.out, BEGIN, END)


if __name__ == "__main__":
    main()
