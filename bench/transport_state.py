"""Benchmark: transport-state (the job's own transport state) beside probe-likelihood on the same
runs (issue 33: a bad link named from the job's own transport in well under a second).

    python bench/transport_state.py --lab rail4 --runs 1 --out docs/benchmarks.md
    python bench/transport_state.py --lab mini --transport tcp --out docs/benchmarks.md

Per fault, one run: an all-ranks allreduce (RoCE at NCCL's timers, or gloo's TCP) and the cover
probe mesh at 100 ms, both detectors live; the fault from 8 s for 8 s. Per detector: faults named, right and
wrong verdicts, precision, recall, and the median and max time to the first right verdict; a set
verdict (links the detector's traffic cannot tell apart) counts with its number of candidates.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

MARKERS = "<!-- transport-state-{}:begin -->", "<!-- transport-state-{}:end -->"
DETECTORS = ("transport-state", "probe-likelihood")
# a fault per kind the issue asks for, on every tier a RoCE ring crosses, by the lab's names
FAULTS = {"rail4": {
    "silent drop 2 %, leaf-spine": {"kind": "silent_drop", "link": "leaf-g1-r1 -- spine-r1-s1", "loss_pct": 2},
    "silent drop 2 %, host link": {"kind": "silent_drop", "link": "leaf-g2-r2 -- host-g2-h1", "loss_pct": 2},
    "bit flips 2 %, leaf-spine": {"kind": "bitflip", "link": "leaf-g1-r2 -- spine-r2-s1", "direction": "both",
                                  "rate_pct": 2},
    "silent drop 3 % one way, spine-superspine": {"kind": "silent_drop", "link": "spine-r1-s1 -- superspine-1",
                                                 "loss_pct": 3, "direction": "a_to_b"},
    "black hole toward one host, spine": {"kind": "blackhole", "node": "spine-r1-s1", "host": "host-g2-h2"},
}, "mini": {
    "silent drop 2 %, leaf-spine": {"kind": "silent_drop", "link": "leaf-g1-r1 -- spine-1", "loss_pct": 2},
    "silent drop 2 %, host link": {"kind": "silent_drop", "link": "leaf-g2-r1 -- host-g2-h1", "loss_pct": 2},
    "bit flips 2 %, host link": {"kind": "bitflip", "link": "leaf-g1-r1 -- host-g1-h2", "direction": "both",
                                 "rate_pct": 2},
    "black hole toward one host, spine": {"kind": "blackhole", "node": "spine-2", "host": "host-g2-h2"},
}}


JOBS = {"roce": "an all-ranks RoCE allreduce (4 MiB, NCCL's timers: first timeout 4.3 s)",
        "tcp": "an all-ranks gloo allreduce over TCP (4 MiB)"}


def scenario(lab: str, name: str, fault: dict, transport: str) -> dict:
    return {"name": name, "lab": lab, "duration_s": 20, "seed": 1,
            "workloads": [{"kind": "allreduce", "transport": transport, "size": "4MiB", "timeout_s": 60},
                          {"kind": "probes", "interval_ms": 100}],
            "faults": [{"id": "fault", "at_s": 8, "duration_s": 8, **fault}],
            "detectors": [{"builtin": name} for name in DETECTORS]}


def run_one(lab: str, label: str, fault: dict, folder: Path, transport: str) -> dict:
    path = folder / "scenario.json"
    path.write_text(json.dumps(scenario(lab, "qp-bench", fault, transport)))
    twin = Path(sys.executable).with_name("twin")
    subprocess.run([str(twin), "run", str(path), "--results", str(folder / "results")], check=False)
    reports = sorted((folder / "results").glob("*/report.json"))
    if not reports:
        raise SystemExit(f"{label}: the run wrote no report under {folder}")
    return json.loads(reports[-1].read_text())["detectors"]


def summary(rows: list[tuple[str, dict]]) -> list[str]:
    lines = ["| fault | " + " | ".join(f"{d}: named after (s), wrong" for d in DETECTORS) + " |",
             "| --- | " + " | ".join("---" for _ in DETECTORS) + " |"]
    for label, detectors in rows:
        cells = []
        for name in DETECTORS:
            score = detectors.get(name, {})
            found = score.get("detect_s", {}).get("fault")
            named = f"{found:.2f}" if found is not None else "not named"
            candidates = score.get("candidates", {}).get("fault")
            named += f" ({candidates} candidates)" if candidates else ""
            cells.append(f"{named}, {score.get('wrong', 0)}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| detector | right | wrong | precision | faults named | median / max time to name (s) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name in DETECTORS:
        scores = [d.get(name, {}) for _label, d in rows]
        right, wrong = sum(s.get("right", 0) for s in scores), sum(s.get("wrong", 0) for s in scores)
        times = [s["detect_s"]["fault"] for s in scores if s.get("detect_s", {}).get("fault") is not None]
        precision = f"{right / (right + wrong):.2f}" if right + wrong else "-"
        timing = f"{statistics.median(times):.2f} / {max(times):.2f}" if times else "-"
        lines.append(f"| {name} | {right} | {wrong} | {precision} | {len(times)} of {len(scores)} | {timing} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lab", default="rail4", choices=sorted(FAULTS))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--transport", default="roce", choices=sorted(JOBS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for label, fault in FAULTS[args.lab].items():
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="qp-bench.") as folder:
                rows.append((label, run_one(args.lab, label, fault, Path(folder), args.transport)))
                print(summary(rows[-1:])[2], flush=True)
    section = args.lab if args.transport == "roce" else f"{args.lab}-{args.transport}"
    begin, end = (marker.format(section) for marker in MARKERS)
    option = "" if args.transport == "roce" else f" --transport {args.transport}"
    lines = [begin, f"## transport-state beside the probes on {args.lab}, {args.transport} (issue 33, "
             f"{datetime.date.today()})", "",
             f"Measured on {machine()}: `python bench/transport_state.py --lab {args.lab} --runs {args.runs}{option}`. "
             f"Per fault, one run: {JOBS[args.transport]} and the cover probe mesh at 100 ms, both detectors live "
             "on the same run; the fault from 8 s for 8 s. Times from onset.", "", *summary(rows), ""]
    emit(lines, args.out, begin, end)


if __name__ == "__main__":
    main()
