"""Everything a results folder shows people, written from the folder itself: report.json,
junit.xml, timeline.png, topology.png and index.html (the page that ties them together). A run
calls this when it ends; `twin report DIR` calls it again at any time."""

from __future__ import annotations

import json
from pathlib import Path

from twin.detect.verdicts import Verdict
from twin.errors import TwinError
from twin.model.draw import draw
from twin.model.targets import Target
from twin.results import record
from twin.results.analysis import analyse
from twin.results.junit import write_junit
from twin.results.report import Report
from twin.results.timeline import write_timeline
from twin.text import clipped, shown

REPORT_FILE = "report.json"


def publish(path: Path) -> Report:
    """Writes only into a folder `record.load` read as a results folder (events.jsonl and a plan)."""
    run = record.load(path)
    try:
        report = analyse(run)
    except (KeyError, TypeError, ValueError) as exc:  # a record of the right shape with the wrong fields
        raise TwinError(f"{shown(path / record.EVENTS_FILE)} holds a record this version cannot read "
                        f"({type(exc).__name__}: {clipped(str(exc), 120)})",
                        hint="the folder was damaged, or written by another version") from None
    try:
        _write_all(run, report, path)
    except OSError as exc:
        raise TwinError(f"cannot write the report into {shown(path)}: {exc.strerror or exc}",
                        hint="a folder you may write, with space left") from None
    return report


def _write_all(run: record.RunFolder, report: Report, path: Path) -> None:
    (path / REPORT_FILE).write_text(report.to_json())
    write_junit(report, path / "junit.xml")
    write_timeline(run, report, path / "timeline.png")
    marked = {t for targets in run.targets.values() for t in targets}
    named = {Target.parse(name).key for r in run.records if r["kind"] == "verdict"
             for name in Verdict.from_record(r).names if name}  # a set verdict: each candidate
    draw(run.fabric, path / "topology.png", marked=marked, named=named)
    write_html(report, path / "index.html")


def write_html(report: Report, path: Path) -> None:
    """One page: verdict first, then faults, detectors, pictures, files."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("twin", "templates"), autoescape=select_autoescape())
    files = sorted(p.name for p in path.parent.iterdir() if p.suffix in (".jsonl", ".json", ".xml"))
    path.write_text(env.get_template("report.html.j2").render(r=report, files=files, dumps=json.dumps))
