"""junit.xml of a run, for CI systems: one test case per fault (applied on schedule) and per
expectation."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

from twin.results.report import SCHEDULE_TOLERANCE_S, Report


def write_junit(report: Report, path: Path) -> None:
    suite = ET.Element("testsuite", name=f"fabric-twin.{report.scenario}")
    cases = failures = 0
    for fault in report.faults:
        case = ET.SubElement(suite, "testcase", classname=report.scenario,
                             name=f"fault {fault.id} ({fault.kind}) applied on schedule")
        cases += 1
        if not fault.on_schedule:
            failures += 1
            ET.SubElement(case, "failure", message=(
                fault.error or f"applied {fault.schedule_error_s} s off schedule (tolerance {SCHEDULE_TOLERANCE_S} s)"))
    for expectation in report.expectations:
        case = ET.SubElement(suite, "testcase", classname=report.scenario,
                             name=f"expect {json.dumps(expectation.expect)}")
        cases += 1
        if not expectation.passed:
            failures += 1
            ET.SubElement(case, "failure", message=f"measured {expectation.measured}, limit {expectation.limit}: "
                          f"{expectation.message}")
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
