"""Benchmark: the adversarial new user (issue 34), counted.

    python bench/adversarial.py [--fuzz 150] [--baseline REV] --out docs/benchmarks.md

Runs every case of tests/unit/adversarial.py (bad and borderline lab and scenario files written
to docs/formats.md, misuses of every command, crash-damaged results folders) and --fuzz mutated
shipped files through `twin`, each in a forked child with its memory and CPU capped, and counts the
outcomes: clear, unclear, traceback, wrong (accepted although it cannot work, or refused although
valid), slow (over 5 s or 500 MB), leaked (created something), destroyed (removed something). With
--baseline, the same cases against that revision of `twin/` (a git worktree) for the before column.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from lab_lifecycle import machine  # noqa: E402
from sections import emit  # noqa: E402

BEGIN, END = "<!-- adversarial:begin -->", "<!-- adversarial:end -->"
VERDICTS = ("clear", "unclear", "traceback", "wrong", "slow", "leaked", "destroyed")
SEED = 20261127


def measure(source: Path, fuzz: int) -> tuple[Counter, dict, list[str]]:
    """Run the cases against the `twin` package in `source` (in a child: one import of twin each)."""
    code = f"""
import json, sys, tempfile
from pathlib import Path
sys.path[:0] = [{str(source)!r}, {str(ROOT / 'tests' / 'unit')!r}]
import adversarial as a
cases = a.all_cases() + a.mutated_cases({fuzz}, seed={SEED})
with tempfile.TemporaryDirectory() as d:
    out = a.run_all(cases, Path(d))
print(json.dumps([[o.case.name, o.verdict, round(o.seconds, 2), round(o.max_rss_mb), o.why[:160]] for o in out]))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rows = __import__("json").loads(result.stdout.strip().splitlines()[-1])
    counts = Counter(r[1] for r in rows)
    slowest = max(rows, key=lambda r: r[2])
    figures = {"cases": len(rows), "slowest": f"{slowest[0]} {slowest[2]} s", "largest_mb": max(r[3] for r in rows)}
    return counts, figures, [f"{r[1]}: {r[0]} ({r[4]})" for r in rows if r[1] != "clear"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fuzz", type=int, default=150, help="mutated shipped files")
    parser.add_argument("--baseline", help="a git revision to count against (e.g. the commit before a fix)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    columns = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        if args.baseline:
            tree = Path(scratch) / "baseline"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), args.baseline],
                           check=True)
            try:
                columns[f"before ({args.baseline})"] = measure(tree, args.fuzz)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "twin"], capture_output=True,
                               text=True).stdout.strip()
        columns[f"now ({head}{' + changes' if dirty else ''})"] = measure(ROOT, args.fuzz)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [BEGIN, f"## Adversarial input: files, commands, damaged results (issue 34, {now[:10]})", "",
             f"`python bench/adversarial.py --fuzz {args.fuzz}" + (f" --baseline {args.baseline}" if args.baseline
                                                                      else "") + f"` on {machine()}, {now}.",
             "Each case runs `twin` in a forked child (4 GiB address space, 30 s of CPU); "
             "slow = over 5 s or 500 MB.", "",
             "| outcome | " + " | ".join(columns) + " |", "| --- |" + " --- |" * len(columns)]
    for verdict in VERDICTS:
        lines.append(f"| {verdict} | " + " | ".join(str(c[0].get(verdict, 0)) for c in columns.values()) + " |")
    lines.append("| cases | " + " | ".join(str(c[1]["cases"]) for c in columns.values()) + " |")
    lines.append("| slowest | " + " | ".join(c[1]["slowest"] for c in columns.values()) + " |")
    lines.append("| most memory (MB) | " + " | ".join(str(c[1]["largest_mb"]) for c in columns.values()) + " |")
    for name, (_counts, _figures, bad) in columns.items():
        notes += [f"- {name}: {line}" for line in bad[:60]]
    emit(lines + ["", *notes], args.out, BEGIN, END)


if __name__ == "__main__":
    main()
