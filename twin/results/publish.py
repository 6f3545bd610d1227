"""Everything a results folder shows people, written from the folder itself: report.json,
junit.xml, timeline.png, topology.png and index.html (the page that ties them together). A run
calls this when it ends; `twin report DIR` calls it again at any time."""

from __future__ import annotations

import json
from pathlib import Path

from twin.model.draw import draw
from twin.model.targets import Target
from twin.results import record
from twin.results.analysis import analyse
from twin.results.junit import write_junit
from twin.results.report import Report
from twin.results.timeline import write_timeline

REPORT_FILE = "report.json"


def publish(path: Path) -> Report:
    run = record.load(path)
    report = analyse(run)
    (path / REPORT_FILE).write_text(report.to_json())
    write_junit(report, path / "junit.xml")
    write_timeline(run, report, path / "timeline.png")
    marked = {t for targets in run.targets.values() for t in targets}
    named = {Target.parse(r["link"]).key if r.get("link") else r.get("node")
             for r in run.records if r["kind"] == "verdict"}
    draw(run.fabric, path / "topology.png", marked=marked, named=named)
    write_html(report, path / "index.html")
    return report


def write_html(report: Report, path: Path) -> None:
    """One page: verdict first, then faults, detectors, pictures, files."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(loader=PackageLoader("twin", "templates"), autoescape=select_autoescape())
    files = sorted(p.name for p in path.parent.iterdir() if p.suffix in (".jsonl", ".json", ".xml"))
    path.write_text(env.get_template("report.html.j2").render(r=report, files=files, dumps=json.dumps))
