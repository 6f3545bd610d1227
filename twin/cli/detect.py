"""twin detect replay: a detector run again on a results folder's recorded probe evidence."""

from __future__ import annotations

import json
from pathlib import Path

import click

from twin.cli.tools import out
from twin.detect.localizer import DETECTOR


@click.group("detect")
def detect() -> None:
    """Evaluate detectors offline, on what runs recorded."""


@detect.command("replay")
@click.argument("folders", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="RESULTS_DIR...")
@click.option("--detector", default=DETECTOR, show_default=True, help="The built-in detector to replay.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def replay_cmd(folders: tuple[Path, ...], detector: str, as_json: bool) -> None:
    """Run DETECTOR again on each folder's probes.jsonl and grade its verdicts against the run's
    faults, next to what the run graded live. Replayed verdicts are timed when their interval
    could first be counted (its end plus the agents' grace); pause counters are not replayed.
    Nothing on the machine is touched."""
    from twin.results.replay import replay

    results = [replay(folder, detector) for folder in folders]
    if as_json:
        out.print_json(json.dumps([{"folder": str(r.folder), "detector": r.detector, "intervals": r.intervals,
                                    "live": r.live.model_dump() if r.live else None,
                                    "replayed": r.replayed.model_dump()} for r in results]))
        return
    for r in results:
        out.print(f"{r.folder}: {r.intervals} probe intervals")
        for label, score in (("live", r.live), ("replayed", r.replayed)):
            if score is None:
                out.print(f"  {label:9} (the run did not use {r.detector})")
                continue
            detected = ", ".join(f"{k} after {v} s" for k, v in score.detect_s.items()) or "nothing"
            out.print(f"  {label:9} {score.verdicts} verdicts, {score.right} right, {score.wrong} wrong, "
                      f"precision {score.precision}, recall {score.recall}; detected {detected}")
