"""Benchmark: detection on generated labs and faults (issue 17), what `twin e2e --generated` runs.

    python bench/generated_drills.py --count 63 --seed 1 --out docs/benchmarks.md

Writes N random labs and drills (twin/run/generate.py), runs each like `twin e2e` (its lab up and
down, graded), and writes per detector and fault kind: drills, faults found, precision, recall,
time to detect (median, max), and the healthy seconds, with the drills that failed and why.
`--kinds misconfig gpu` runs only those drills of the same set (the same labs and faults as the
full run draws), in a section of their own. `--shapes hard` draws 2-tier and one-group labs only
(issue 33: the shapes where few paths cross each link), in a section of its own.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from contextlib import nullcontext
from pathlib import Path

from twin.progress import NullProgress
from twin.run.drill import run_drill
from twin.run.generate import DETECTORS, KINDS, SHAPES, generate, score
from twin.run.plan import load_scenario

sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN, END = "<!-- generated-drills:begin -->", "<!-- generated-drills:end -->"


def render(drills, outcomes, command: str, begin: str = BEGIN, end: str = END, title: str = "") -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = title or "Generated drills: detection on labs nobody tuned it on (issue 17"
    lines = [begin, f"## {title}, {now[:10]})", "",
             f"Measured {now} on {machine()}.", f"Command: `{command}` (= `twin e2e --generated N --seed S`)", "",
             f"{len(drills)} drills, {sum(o.passed for o in outcomes)} passed every expectation. Precision counts "
             "every verdict of the detector in the run (healthy runs included); recall the injected faults it named; "
             "after end: verdicts "
             "received after the run's end, not graded (a runner behind its agents delivers a verdict late).", ""]
    for detector in DETECTORS:
        lines += [f"**{detector}**", "",
                  "| kind | drills | faults found | precision | recall | detect s (median, max) | healthy s "
                  "| after end |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for row in score(drills, outcomes, detector):
            times = f"{row.median_s()}, {max(row.detect_s):.2f}" if row.detect_s else "-"
            lines.append(f"| {row.kind} | {row.drills} | {row.found} of {row.faults} | {row.precision} | "
                         f"{row.recall} | {times} | {f'{row.healthy_s:g}' if row.kind == 'healthy' else '-'} "
                         f"| {row.after_end} |")
        lines.append("")
    failed = [(d, o) for d, o in zip(drills, outcomes) if not o.passed]
    if failed:
        lines += ["Drills that failed an expectation:", ""]
        for drill, outcome in failed:
            why = outcome.error or "; ".join(f"{e.kind}: {e.message}" for e in outcome.report.expectations
                                             if e.status != "pass")
            lines.append(f"- {drill.scenario.stem} on `{drill.lab}` ({drill.kind}): {why}")
    lines += [end]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=49)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--results", type=Path, default=Path("results/bench-generated"))
    parser.add_argument("--kinds", nargs="+", choices=KINDS, help="only the drills of these kinds")
    parser.add_argument("--issue", type=int, default=31, help="with --kinds: the issue the section measures")
    parser.add_argument("--shapes", choices=SHAPES, default="any",
                        help="hard: 2-tier or one-group labs only (issue 33), in a section of their own")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    suffix = "" if args.shapes == "any" else f"-{args.shapes}"
    drills = generate(args.count, args.seed, args.results / f"generated-seed{args.seed}{suffix}", args.shapes)
    if args.kinds:
        drills = [d for d in drills if d.kind.split("<")[0].split(":")[0] in args.kinds]
    plans = [load_scenario(d.scenario) for d in drills]

    def started(number, plan) -> None:
        print(f"[{number}/{len(plans)}] {plan.name} on {plan.fabric.name}", flush=True)

    def finished(_plan, outcome) -> None:
        print(f"  {'pass' if outcome.passed else 'FAIL'} {outcome.error or ''}", flush=True)

    outcomes = run_drill(plans, args.results, False, lambda: nullcontext(NullProgress()), started, finished)
    command = "python bench/generated_drills.py " + " ".join(sys.argv[1:])
    if args.shapes != "any":  # a section of its own, beside the full set's
        begin, end = f"<!-- generated-drills-{args.shapes}:begin -->", f"<!-- generated-drills-{args.shapes}:end -->"
        section = render(drills, outcomes, command, begin, end,
                         "Generated drills on 2-tier and one-group labs only, the shapes few paths cross (issue 33")
    elif args.kinds:  # a section of its own, beside the full set's
        tag = "-".join(args.kinds)
        begin, end = f"<!-- generated-drills-{tag}:begin -->", f"<!-- generated-drills-{tag}:end -->"
        section = render(drills, outcomes, command, begin, end,
                         f"Generated drills, {' and '.join(args.kinds)} only (issue {args.issue}")
    else:
        begin, end, section = BEGIN, END, render(drills, outcomes, command)
    print(section)
    if args.out:
        write_section(args.out, begin, end, section)


if __name__ == "__main__":
    main()
