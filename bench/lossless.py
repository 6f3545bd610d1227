"""Benchmark: PFC backpressure against congestion drops, on the same fabrics and loads.

    python bench/lossless.py --labs rail4 rail8:100mbit --seconds 60 --healthy-s 300 --out docs/benchmarks.md

For every lab (a shipped lab, optionally at another line rate: `rail8:100mbit`, so that two cores
carry 32 ranks), once lossless (the lab as shipped, `pfc: true`) and once lossy (a copy with
`pfc: false`, same buffers):
- an `allreduce` over every NIC (`ranks: all`, cross-rail) at 8 MiB and at 64 MiB, back to back
  for `--seconds`, as a scenario (`twin run`): packets dropped by any queue of any switch or host,
  pauses and paused seconds, busbw against line rate, the PFC controller's reaction times and CPU,
  and how busy the cores were;
- an 8:1 incast of bulk TCP flows into one NIC (8 sender NICs of the other hosts, two flows each),
  on the lab brought up for it: queue drops, TCP retransmissions, pauses, the receiver's goodput
  against line rate.
Then a healthy run on the first lab, lossless: the all-ranks allreduce and the probe mesh with the
default probe detector for `--healthy-s` (probes lost, verdicts), and the pfc-storm drill (precision of
naming the storm's source). Rewrites the "Lossless fabric" section of the output file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ruamel.yaml import YAML

sys.path.insert(0, str(Path(__file__).parent))
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- lossless:begin -->", "<!-- lossless:end -->"
TWIN = [sys.executable, "-c", "from twin.cli import main; main()"]
DETECTOR = "probe-likelihood"  # the probe detector the shipped scenarios use (pfc-storm among them)


def cpu_times() -> list[tuple[int, int]]:
    """(busy, total) jiffies per core."""
    rows = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3].isdigit():
            values = [int(v) for v in line.split()[1:]]
            rows.append((sum(values) - values[3] - values[4], sum(values)))
    return rows


def busy(before, after) -> str:
    return ", ".join(f"{100 * (b1 - b0) / max(1, t1 - t0):.0f}%" for (b0, t0), (b1, t1) in zip(before, after))


def lab_variant(name: str, rate: str | None, lossless: bool, folder: Path) -> Path:
    return lab_copy(name, name if lossless else f"{name}-lossy", folder, rate, {"pfc": lossless})


def run_scenario(doc: dict, folder: Path, results: Path) -> dict:
    path = folder / f"{doc['name']}.yaml"
    path.write_text(json.dumps(doc))
    before = set(results.glob(f"{doc['name']}-*"))
    started = cpu_times()
    done = subprocess.run([*TWIN, "run", str(path), "--results", str(results)], capture_output=True, text=True)
    cores = busy(started, cpu_times())
    new = sorted(set(results.glob(f"{doc['name']}-*")) - before)
    if not new or not (new[-1] / "report.json").is_file():
        raise SystemExit(f"{doc['name']} produced no report: {done.stderr[-800:]}")
    report = json.loads((new[-1] / "report.json").read_text())
    report["cpu_busy"] = cores
    report["busiest_link_bps"] = busiest_link_bps(new[-1] / "metrics.jsonl")
    return report


def busiest_link_bps(metrics: Path) -> float | None:
    """The most bytes any interface sent per second between the first and last counter samples."""
    if not metrics.is_file():
        return None
    lines = metrics.read_text().splitlines()
    if len(lines) < 3:
        return None
    header, first, last = json.loads(lines[0]), json.loads(lines[1]), json.loads(lines[-1])
    column = header["fields"].index("tx_bytes")
    seconds = last["t_mono"] - first["t_mono"]
    return max((b[column] - a[column]) * 8 / seconds for a, b in zip(first["v"], last["v"]))


def collective_row(label: str, report: dict, rate_bps: int) -> str:
    fabric = report["fabric"] or {}
    collective = next(iter(report["collectives"].values()), {})
    base = collective.get("baseline", {})
    line = base.get("median_busbw_Bps", 0) * 8 / rate_bps if base.get("median_busbw_Bps") else None
    busiest = report.get("busiest_link_bps")
    controller = fabric.get("controller") or {}
    reaction = controller.get("reaction", {})
    return " | ".join([label, str(fabric.get("queue_drops")), str(fabric.get("pauses", 0)),
                       f"{sum(fabric.get('pause_s', {}).values()):.2f}",
                       "-" if line is None else f"{line:.2f}",
                       "-" if busiest is None else f"{busiest / rate_bps:.2f}", str(base.get("iterations", 0)),
                       str(collective.get("hangs", "-")),
                       f"{reaction.get('p50_us', '-')} / {reaction.get('p99_us', '-')} / {reaction.get('max_us', '-')}"
                       if reaction.get("events") else "-",
                       f"{controller.get('cpu_s', '-')}" if controller else "-", report["cpu_busy"]])


ONSET_S = 1.0  # an incast's first second: its senders start at line rate, before any congestion control acts


class PauseClock:
    """The lab's pauses counted every 250 ms from the controller's published counters, in a thread:
    how many came in the incast's first ONSET_S and how many after."""

    def __init__(self, root: Path):
        import threading
        self.root, self.samples, self._stop = root, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pauses(self) -> int:
        from twin.lab.pfc import published as pfc_counters
        return sum(c.rx_pause for c in (pfc_counters.ports(pfc_counters.read(self.root)) or {}).values())

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - started, self._pauses()))
            self._stop.wait(0.25)

    def __enter__(self) -> PauseClock:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((float("inf"), self._pauses()))

    def split(self) -> tuple[int, int]:
        """(pauses in the first ONSET_S, pauses after), from the first sample after it."""
        first = self.samples[0][1]
        at_onset = next(count for t, count in self.samples if t >= ONSET_S)
        return at_onset - first, self.samples[-1][1] - at_onset


def measured_incast(lab_path: Path, send) -> dict:
    """Bring the lab up, run `send(lab, senders, receiver)` (8 NICs of other hosts into the first
    NIC), and say what the queues did meanwhile: drops, pauses (and how many in the first second),
    paused seconds, ECN marks, the controller's reaction, how busy the cores were; with what `send`
    returned."""
    from twin.lab import deploy
    from twin.lab.files import open_lab
    from twin.lab.pfc import published as pfc_counters
    from twin.lab.ports.counters import CounterReader
    from twin.model.nics import fabric_nics

    lab_file, fabric = open_lab(str(lab_path))
    lab = deploy.up(lab_file, fabric)
    try:
        nics = fabric_nics(fabric)
        receiver = nics[0]
        senders = [n for n in nics if n.host != receiver.host][:8]
        with CounterReader(lab) as reader:
            drops0 = sum(v.get("qdisc_drops", 0) for v in reader.read(checksums=False).interfaces.values())
            pfc0 = pfc_counters.ports(pfc_counters.read(lab.paths.root))
            started = cpu_times()
            with PauseClock(lab.paths.root) as clock:
                sent = send(lab, senders, receiver)
            cores = busy(started, cpu_times())
            drops = sum(v.get("qdisc_drops", 0) for v in reader.read(checksums=False).interfaces.values()) - drops0
        time.sleep(0.3)  # the controller publishes what moved within 100 ms
        document = pfc_counters.read(lab.paths.root)
        pfc = pfc_counters.ports(document)
        return {"senders": len(senders), "receiver": receiver.label, "drops": drops,
                "pauses": sum(c.rx_pause - pfc0[k].rx_pause for k, c in pfc.items()) if pfc0 else 0,
                "paused_s": round(sum(c.paused_s - pfc0[k].paused_s for k, c in pfc.items()), 2) if pfc0 else 0.0,
                "pauses_onset_after": clock.split(),
                "marks": sum(c.ecn_marked - pfc0[k].ecn_marked for k, c in pfc.items()) if pfc0 else 0,
                "cpu_busy": cores, "reaction": (document or {}).get("controller", {}).get("reaction", {}), **sent}
    finally:
        deploy.down(fabric.name)


def incast(lab_path: Path, seconds: float) -> dict:
    from twin.lab.traffic import tcp_incast

    def send(lab, senders, receiver) -> dict:
        result = tcp_incast(lab, senders, receiver, seconds, flows_per_sender=2)
        return {"retransmits": sum(result.retransmits),
                "goodput_line": round(result.goodput_bps / lab.fabric.rate_bps, 3)}
    return measured_incast(lab_path, send)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labs", nargs="+", default=["rail4", "rail8:100mbit"])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--incast-s", type=float, default=20.0)
    parser.add_argument("--healthy-s", type=float, default=300.0)
    parser.add_argument("--sizes", nargs="+", default=["8MiB", "64MiB"])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "lossless")
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    from twin.units import parse_rate_bps

    collective_rows, incast_rows = [], []
    with tempfile.TemporaryDirectory(prefix="fabric-twin-lossless-") as tmp:
        folder = Path(tmp)
        for spec in args.labs:
            name, _, rate = spec.partition(":")
            for lossless in (True, False):
                lab_path = lab_variant(name, rate or None, lossless, folder)
                rate_bps = parse_rate_bps(rate or "200mbit")
                mode = "lossless (PFC)" if lossless else "lossy"
                label = f"{name}{' at ' + rate if rate else ''}, {mode}"
                for size in args.sizes:
                    print(f"{label}: allreduce {size}, all ranks, {args.seconds:g} s", flush=True)
                    doc = {"name": f"lossless-{name}-{size.lower()}-{'pfc' if lossless else 'lossy'}",
                           "lab": str(lab_path), "duration_s": args.seconds,
                           "workloads": [{"kind": "allreduce", "size": size, "ranks": "all", "timeout_s": 30}]}
                    report = run_scenario(doc, folder, args.results)
                    collective_rows.append(collective_row(f"{label}, allreduce {size}", report, rate_bps))
                print(f"{label}: 8:1 TCP incast, {args.incast_s:g} s", flush=True)
                result = incast(lab_path, args.incast_s)
                reaction = result["reaction"]
                incast_rows.append(" | ".join([
                    label, f"{result['senders']} NICs x 2 flows -> {result['receiver']}", str(result["drops"]),
                    str(result["retransmits"]), str(result["pauses"]), f"{result['paused_s']:.1f}",
                    f"{result['goodput_line']:.2f}",
                    f"{reaction.get('p50_us')} / {reaction.get('p99_us')} / {reaction.get('max_us')}"
                    if reaction.get("events") else "-", result["cpu_busy"]]))
        first = args.labs[0].split(":")[0]
        print(f"{first}: healthy, all-ranks allreduce and the probe mesh, {args.healthy_s:g} s", flush=True)
        healthy = run_scenario({
            "name": f"lossless-{first}-healthy", "lab": first, "duration_s": args.healthy_s,
            "workloads": [{"kind": "allreduce", "size": "8MiB", "ranks": "all", "timeout_s": 30},
                          {"kind": "probes", "interval_ms": 100, "report_ms": 250}],
            "detectors": [{"builtin": DETECTOR}], "expect": [{"max_wrong_verdicts": 0}]}, folder, args.results)
        print("pfc-storm drill", flush=True)
        storm = run_scenario(YAML(typ="safe").load((ROOT / "scenarios" / "pfc-storm.yaml").read_text()),
                             folder, args.results)

    probes = healthy["probes"]["baseline"]
    verdicts = sum(d["verdicts"] for d in healthy["detectors"].values())
    detector = storm["detectors"].get(DETECTOR, {})
    today = datetime.date.today().isoformat()
    section = "\n".join([
        BEGIN,
        f"## Lossless fabric: PFC backpressure against congestion drops (issue 14, {today})",
        "",
        f"`python bench/lossless.py --labs {' '.join(args.labs)} --seconds {args.seconds:g} --incast-s "
        f"{args.incast_s:g} --healthy-s {args.healthy_s:g}` on {machine()}. Each lab once as shipped (lossless) "
        "and once as a copy with `pfc: false` (the same buffers, so the only difference is PFC). Queue drops: "
        "packets dropped by any qdisc of any switch or host over the run; pauses: PFC pause episodes; paused s: "
        "paused seconds summed over link directions; busbw: median over the run's iterations, against line rate; "
        "busiest link: the most any interface sent per second over the run (counters, 100 ms), against line rate; "
        "reaction: the PFC controller's kernel-event-to-gate times (p50 / p99 / max, us) and its CPU seconds.",
        "",
        "| run | queue drops | pauses | paused s | busbw / line | busiest link / line | iterations | hangs "
        "| reaction us | controller CPU s | cores busy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *[f"| {row} |" for row in collective_rows],
        "",
        f"8:1 incast of bulk TCP into one NIC, {args.incast_s:g} s:",
        "",
        "| lab | senders | queue drops | TCP retransmits | pauses | paused s | receiver goodput / line "
        "| reaction us | cores busy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *[f"| {row} |" for row in incast_rows],
        "",
        f"Healthy {first}, all-ranks allreduce 8 MiB and the probe mesh (100 ms) with {DETECTOR}, "
        f"{args.healthy_s:g} s: {probes['sent']} probes sent, **{probes['lost']} lost**, **{verdicts} verdicts**; "
        f"queue drops {healthy['fabric']['queue_drops']}, pauses {healthy['fabric']['pauses']}; "
        f"cores {healthy['cpu_busy']}.",
        "",
        f"pfc-storm drill (`scenarios/pfc-storm.yaml`): {DETECTOR} precision **{detector.get('precision')}**, "
        f"recall {detector.get('recall')}, named {detector.get('detect_s')} s after onset; queue drops "
        f"{storm['fabric']['queue_drops']}; passed: {storm['passed']}.",
        END,
    ])
    write_section(args.out, BEGIN, END, section + "\n")
    print(section)


if __name__ == "__main__":
    main()
