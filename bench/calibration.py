"""Benchmark: are the probe detectors' confidences probabilities? (issue 33)

    python bench/calibration.py RESULTS_DIR... --out docs/benchmarks.md

Reads every results folder under the given directories (a generated-drill set, a fault drill),
grades each verdict as its run did, and buckets each probe detector's verdicts by the confidence
it gave them: a calibrated detector's bucket around 0.98 is right about 98 % of the time.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

from twin.detect.builtins import BUILTINS  # noqa: E402
from twin.errors import TwinError  # noqa: E402
from twin.results.calibration import outcomes, table  # noqa: E402

BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"
PROBE_DETECTORS = [name for name in BUILTINS.names() if BUILTINS.get(name).localizer is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", type=Path, help="directories holding results folders")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folders = sorted({report.parent for root in args.results for report in root.glob("**/report.json")})
    graded: dict[str, list[tuple[float | None, bool]]] = {name: [] for name in PROBE_DETECTORS}
    unread = 0
    for folder in folders:
        try:
            for detector, confidence, right in outcomes(folder):
                if detector in graded:
                    graded[detector].append((confidence, right))
        except TwinError:
            unread += 1
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## Calibration of the probe detectors' confidence (issue 33, {now[:10]})", "",
             f"`python bench/calibration.py {' '.join(str(r) for r in args.results)}` on {machine()}, {now}: "
             f"{len(folders) - unread} results folders ({unread} unreadable). Each verdict graded as its run "
             "graded it, bucketed by the confidence the detector gave it.", ""]
    for detector, pairs in graded.items():
        lines += [f"**{detector}**: {len(pairs)} verdicts", "",
                  "| confidence | verdicts | mean confidence | right | share right |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {b.label} | {b.verdicts} | {b.mean_confidence if b.verdicts else '-'} | {b.right} | "
                  f"{b.share_right if b.verdicts else '-'} |" for b in table(pairs)]
        lines.append("")
    emit(lines, args.out, BEGIN, END)


if __name__ == "__main__":
    main()
