"""Planned changes (a scenario's `changes:`) without a lab: which lines a change may hold, how a
scenario schedules changes beside faults, the quick timeline, and the `loss` expectation."""

import pydantic
import pytest

from twin.faults.change import ChangeParams
from twin.results.expectations import Expectation, grade
from twin.results.report import FaultWindow, FlowStats, Report
from twin.run.plan import load_scenario
from twin.spec.quick import QUICK_LEAD_S, shorten

DRAIN = {"node": "spine-1", "config": ["router bgp 65100", "bgp graceful-shutdown"],
         "undo": ["router bgp 65100", "no bgp graceful-shutdown"]}


def test_a_change_holds_configuration_lines_only():
    assert ChangeParams(**DRAIN).daemon == "bgpd"
    for line in ("end", "do show running-config", "write memory", "start-shell bash", "log file /etc/x",
                 "router bgp 1\nend", "", "  "):
        with pytest.raises(pydantic.ValidationError):
            ChangeParams(**{**DRAIN, "config": ["router bgp 65100", line]})
    with pytest.raises(pydantic.ValidationError):
        ChangeParams(**{k: v for k, v in DRAIN.items() if k != "undo"})  # no change without its undo


def scenario(tmp_path, body: str):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nlab: mini\nduration_s: 40\nworkloads: [{kind: flows}]\n" + body)
    return load_scenario(path)


def test_changes_join_the_faults_timeline_and_may_overlap_each_other_and_faults(tmp_path):
    plan = scenario(tmp_path, """
faults:
  - {id: cut, kind: link_down, link: leaf-g1-r1 -- spine-1, at_s: 12, duration_s: 4}
changes:
  - {id: drain, node: spine-1, at_s: 5, duration_s: 20, config: [router bgp 65100, bgp graceful-shutdown],
     undo: [router bgp 65100, no bgp graceful-shutdown]}
  - {id: ports, node: spine-1, daemon: zebra, at_s: 10, duration_s: 5, config: [interface lf-g1r1, shutdown],
     undo: [interface lf-g1r1, no shutdown]}
expect:
  - loss: {fault: drain, max_pct: 0}
""")
    assert [(f.timing.id, f.timing.kind, f.targets) for f in plan.faults] == [
        ("drain", "change", ["spine-1"]), ("ports", "change", ["spine-1"]),
        ("cut", "link_down", ["leaf-g1-r1 -- spine-1"])]


def test_quick_moves_changes_with_the_faults():
    data = {"duration_s": 60, "faults": [{"at_s": 20, "duration_s": 5}], "changes": [{"at_s": 15, "duration_s": 20}]}
    shorten(data)
    assert data["changes"][0]["at_s"] == QUICK_LEAD_S and data["faults"][0]["at_s"] == QUICK_LEAD_S + 5
    assert data["duration_s"] == QUICK_LEAD_S + 20 + 3


def window(sent, received):
    return FaultWindow(id="drain", kind="change", scheduled_s=5.0, applied_s=5.0, cleared_s=25.0,
                       flows=FlowStats(intervals=20, sent=sent, received=received,
                                       loss_pct=round(100 * (sent - received) / sent, 3) if sent else None))


@pytest.mark.parametrize("limit, sent, received, status", [
    ({"max_pct": 0}, 1000, 1000, "pass"), ({"max_pct": 0}, 1000, 999, "fail"),
    ({"min_pct": 0.05}, 1000, 999, "pass"), ({"min_pct": 0.5}, 1000, 999, "fail"),
    ({"max_pct": 0}, 0, 0, "fail"),  # no flow packet in the window: nothing shows it lossless
])
def test_loss_grades_the_flows_in_the_window(limit, sent, received, status):
    report = Report(scenario="s", faults=[window(sent, received)], duration_s=40.0)
    graded = grade([Expectation.model_validate({"loss": {"fault": "drain", **limit}})], report, [])
    assert graded[0]["status"] == status, graded[0]["message"]
