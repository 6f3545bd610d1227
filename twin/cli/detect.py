"""twin detect replay: a detector run again on a results folder's recorded probe evidence."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from twin.cli.tools import out
from twin.detect.localizer import DETECTOR
from twin.detect.transport_state import DETECTOR as TRANSPORT_STATE


@click.group("detect")
def detect() -> None:
    """Evaluate detectors offline, on what runs recorded."""


@detect.command("replay")
@click.argument("folders", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="RESULTS_DIR...")
@click.option("--detector", "detectors", multiple=True, metavar="NAME",
              help=f"A built-in probe detector, or transport-state, to replay (repeatable; default: {DETECTOR}).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def replay_cmd(folders: tuple[Path, ...], detectors: tuple[str, ...], as_json: bool) -> None:
    """Run each DETECTOR again on each folder's probes.jsonl (transport-state: its transport.jsonl)
    and grade its verdicts against the run's faults, next to what the run graded live; with two or
    more detectors, a table compares them over all folders. Replayed verdicts are timed when their
    interval could first be counted (its end plus the agents' grace); pause counters are not
    replayed. Nothing on the machine is touched."""
    from twin.results.replay import replay

    results = [replay(folder, detector) for folder in folders for detector in detectors or (DETECTOR,)]
    if as_json:
        out.print_json(json.dumps([{"folder": str(r.folder), "detector": r.detector, "intervals": r.intervals,
                                    "live": r.live.model_dump() if r.live else None,
                                    "replayed": r.replayed.model_dump(), "damaged": r.damaged} for r in results]))
        return
    for r in results:
        read = "QP state rows" if r.detector == TRANSPORT_STATE else "probe intervals"
        out.print(f"{r.folder}: {r.intervals} {read}")
        for note in r.damaged:
            out.print(f"  [yellow]damaged:[/] {escape(note)}")
        for label, score in (("live", r.live), ("replayed", r.replayed)):
            if score is None:
                out.print(f"  {label:9} (the run did not use {r.detector})")
                continue
            out.print(f"  {label:9} {score.verdicts} verdicts, {score.right} right, {score.wrong} wrong, "
                      f"precision {score.precision}, recall {score.recall}; detected {score.detected()}")
    if len(set(r.detector for r in results)) > 1:
        out.print(compare_table(results))


def compare_table(results) -> Table:
    """Per detector over every folder: verdicts, right, wrong, precision, recall, time to detect."""
    table = Table(title=f"replayed on {len({r.folder for r in results})} results folders", title_justify="left")
    for column in ("detector", "verdicts", "right", "wrong", "precision", "faults found", "detect s (median, max)"):
        table.add_column(column)
    for name in dict.fromkeys(r.detector for r in results):
        mine = [r for r in results if r.detector == name]
        right, wrong = sum(r.replayed.right for r in mine), sum(r.replayed.wrong for r in mine)
        found = [t for r in mine for t in r.replayed.detect_s.values()]
        times = f"{statistics.median(found):.2f}, {max(found):.2f}" if found else "-"
        table.add_row(name, str(sum(r.replayed.verdicts for r in mine)), str(right), str(wrong),
                      f"{right / (right + wrong):.3f}" if right + wrong else "-",
                      f"{len(found)} of {sum(r.faults for r in mine)}", times)
    return table
