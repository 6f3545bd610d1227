"""Grading expectations and detectors from a synthetic run: right and wrong verdicts, slowdowns,
hangs, recovery, and the measured value behind every pass and fail."""

import math

from twin.results.expectations import Expectation, grade
from twin.results.grading import detectors
from twin.results.report import FaultWindow, Report

FAULT = FaultWindow(id="bad", kind="silent_drop", scheduled_s=10.0, applied_s=10.01, cleared_s=20.0,
                    last_route_change_s=None, flows_recovered_after_s=0.5)
TARGETS = {"bad": ["leaf-g1-r1 -- spine-1"]}


def verdict(t, detector, link=None, node=None):
    return {"t": t, "kind": "verdict", "detector": detector, "link": link, "node": node}


RECORDS = [
    {"t": 0.0, "kind": "detector", "detector": "silent-one"},
    verdict(4.0, "ext", link="leaf-g2-r1 -- spine-2"),          # before the fault: wrong
    verdict(11.2, "ext", link="spine-1 -- leaf-g1-r1"),         # right, either order
    verdict(11.5, "localizer", node="spine-1"),                  # a switch, not the link: wrong
    verdict(30.0, "localizer", link="leaf-g1-r1 -- spine-1"),    # long after the clear: wrong
    {"t": 12.0, "kind": "collective", "workload": "train-0", "step_s": 0.9, "iter": 5, "gen": 0},
    {"t": 14.0, "kind": "collective", "workload": "train-0", "step_s": 0.2, "iter": 6, "gen": 0},
]


def report(collectives=None):
    r = Report(scenario="grading", faults=[FAULT], duration_s=40.0, collectives=collectives or {})
    r.detectors = detectors(RECORDS, r.faults, TARGETS, r.duration_s)
    return r


def test_detector_scores():
    d = {name: score.model_dump() for name, score in report().detectors.items()}
    assert d["ext"] == {"verdicts": 2, "right": 1, "wrong": 1, "precision": 0.5, "recall": 1.0,
                        "detect_s": {"bad": 1.19}, "after_end": 0, "candidates": {}}
    assert d["localizer"]["detect_s"] == {} and d["localizer"]["wrong"] == 2
    assert d["silent-one"] == {"verdicts": 0, "right": 0, "wrong": 0, "precision": None, "recall": 0.0,
                               "detect_s": {}, "after_end": 0, "candidates": {}}


def test_a_set_verdict_is_right_only_within_what_the_plan_cannot_tell_apart():
    """Two links on exactly the same probed paths (the plan's class): naming both is right and
    the fault counts as localized to 2; a set that is wider than the class, or one without the
    fault, is wrong; so is any set when the run recorded no plan."""
    plan = {"t": 0.0, "kind": "workload", "op": "start", "workload": "probes",
            "ambiguous": [["leaf-g1-r1 -- spine-1", "spine-1 -- leaf-g2-r1"]]}

    def sets(*links, t=11.0, detector="set"):
        return {"t": t, "kind": "verdict", "detector": detector, "link": None, "node": None, "links": list(links)}
    records = [plan,
               sets("leaf-g2-r1 -- spine-1", "leaf-g1-r1 -- spine-1"),                                 # the class
               sets("leaf-g1-r1 -- spine-1", "leaf-g2-r1 -- spine-1", "leaf-g1-r1 -- spine-2", t=11.5),  # wider
               sets("leaf-g2-r1 -- spine-2", "leaf-g1-r1 -- spine-2", detector="other")]             # elsewhere
    scores = detectors(records, [FAULT], TARGETS, 40.0)
    assert (scores["set"].right, scores["set"].wrong, scores["set"].candidates) == (1, 1, {"bad": 2})
    assert (scores["other"].right, scores["other"].wrong) == (0, 1)
    unplanned = detectors(records[1:2], [FAULT], TARGETS, 40.0)
    assert (unplanned["set"].right, unplanned["set"].wrong) == (0, 1)


def test_a_detectors_own_classes_make_only_its_own_sets_honest():
    """transport-state records the links its QPs cannot tell apart: its set over one QP's path is
    right; the same set from a probe detector, whose plan records no such class, is wrong."""
    path = ["leaf-g1-r1 -- spine-1", "spine-1 -- leaf-g2-r1", "leaf-g1-r1 -- host-g1-h1"]
    classes = {"t": 1.0, "kind": "detector", "op": "ambiguous", "detector": "qps", "ambiguous": [path]}

    def sets(detector):
        return {"t": 11.0, "kind": "verdict", "detector": detector, "link": None, "node": None, "links": path}
    scores = detectors([classes, sets("qps"), sets("probes")], [FAULT], TARGETS, 40.0)
    assert (scores["qps"].right, scores["qps"].candidates) == (1, {"bad": 3})
    assert (scores["probes"].right, scores["probes"].wrong) == (0, 1)


def test_expectations_pass_and_fail_with_measured_values():
    collectives = {"train-0": {"baseline": {"median_step_s": 0.2}, "hangs": 0, "first_hang_s": None,
                               "recovered_s": None, "fault_windows": [{"iterations": 3, "slowdown": 1.8}]}}
    expectations = [Expectation.model_validate(e) for e in (
        {"detect": {"fault": "bad", "within_s": 2}}, {"detect": {"fault": "bad", "within_s": 1}},
        {"collective": {"max_slowdown": 1.5}}, {"no_hang": True}, {"recover": {"workload": "train", "within_s": 5}},
        {"reroute": {"fault": "bad", "within_s": 1}},
    )]
    graded = grade(expectations, report(collectives), RECORDS)
    assert [(g["kind"], g["status"], g["measured"]) for g in graded] == [
        ("detect", "pass", 1.19), ("detect", "fail", 1.19), ("collective", "fail", 1.8), ("no_hang", "pass", 0),
        ("recover", "pass", 2.89), ("reroute", "fail", None)]
    assert "routing never changed" in graded[-1]["message"]


def test_a_window_without_a_finished_iteration_is_an_infinite_slowdown():
    collectives = {"train-0": {"baseline": {"median_step_s": 0.2}, "hangs": 1, "first_hang_s": 10.5,
                               "recovered_s": None, "fault_windows": [{"iterations": 0}]}}
    expectations = [Expectation.model_validate(e) for e in (
        {"collective": {"max_slowdown": 100}}, {"no_hang": True}, {"recover": {"workload": "train-0", "within_s": 60}})]
    graded = grade(expectations, report(collectives), RECORDS)
    assert [g["status"] for g in graded] == ["fail", "fail", "fail"]
    assert "without a single finished iteration" in graded[0]["message"]
    assert math.isfinite(graded[1]["measured"]) and graded[2]["message"] == "never recovered"


def test_max_wrong_verdicts_counts_every_detectors_false_positives():
    expectations = [Expectation.model_validate({"max_wrong_verdicts": n}) for n in (3, 2)]
    graded = grade(expectations, report(), RECORDS)
    assert [(g["status"], g["measured"], g["limit"]) for g in graded] == [("pass", 3, 3), ("fail", 3, 2)]


def test_detection_counts_from_the_end_of_the_apply_and_a_verdict_during_it_is_right():
    slow = FAULT.model_copy(update={"apply_took_s": 0.8})
    records = [verdict(10.5, "during-apply", link="leaf-g1-r1 -- spine-1"),
               verdict(11.3, "after", link="leaf-g1-r1 -- spine-1")]
    d = detectors(records, [slow], TARGETS, 40.0)
    assert d["during-apply"].detect_s == {"bad": 0.0} and d["during-apply"].wrong == 0
    assert d["after"].detect_s == {"bad": 0.49}


def test_min_slowdown_and_hangs_per_workload():
    collectives = {
        "allreduce-0": {"baseline": {"median_step_s": 0.3}, "hangs": 0, "hang_events": [], "first_hang_s": None,
                        "recovered_s": None, "fault_windows": [{"iterations": 2, "slowdown": 3.5}]},
        "allreduce-1": {"baseline": {"median_step_s": 0.3}, "hangs": 1, "first_hang_s": 10.2, "recovered_s": 12.0,
                        "hang_events": [{"t": 10.2, "rank": 0, "gen": 0, "waited_s": 0.5, "cause": "transport_error"},
                                        {"t": 10.2, "rank": 1, "gen": 0, "waited_s": 0.6, "cause": "peer_closed"}],
                        "fault_windows": [{"iterations": 0}]}}
    expectations = [Expectation.model_validate(e) for e in (
        {"collective": {"workload": "allreduce-0", "min_slowdown": 2}},
        {"collective": {"workload": "allreduce-0", "min_slowdown": 5}},
        {"collective": {"workload": "allreduce-1", "min_slowdown": 2}},  # no iteration at all: stalled
        {"no_hang": {"workload": "allreduce-0"}}, {"no_hang": {"workload": "allreduce-1"}},
        {"hang": {"workload": "allreduce-1", "cause": "transport_error"}},
        {"hang": {"workload": "allreduce-1", "cause": "timeout"}}, {"hang": {"workload": "allreduce-0"}})]
    graded = grade(expectations, report(collectives), RECORDS)
    assert [g["status"] for g in graded] == ["pass", "fail", "pass", "pass", "fail", "pass", "fail", "fail"]
    assert graded[5]["measured"] == ["peer_closed", "transport_error"]


def test_a_step_the_fault_caught_running_counts_toward_recovery():
    """Steps are recorded at their start: one that began before the onset and stalled through it
    (an RC timeout after a leaf died under it) is the fault's, and recovery waits for its end."""
    collectives = {"train-0": {"baseline": {"median_step_s": 0.2}, "hangs": 0, "first_hang_s": None,
                               "recovered_s": None, "fault_windows": [{"iterations": 1, "slowdown": 20}]}}
    records = [{"t": 9.9, "kind": "collective", "workload": "train-0", "step_s": 4.5, "iter": 5, "gen": 0},
               {"t": 14.4, "kind": "collective", "workload": "train-0", "step_s": 0.2, "iter": 6, "gen": 0},
               {"t": 9.0, "kind": "collective", "workload": "train-0", "step_s": 0.9, "iter": 4, "gen": 0}]
    expectations = [Expectation.model_validate({"recover": {"workload": "train", "within_s": 3}})]
    [graded] = grade(expectations, report(collectives), records)
    assert (graded["status"], graded["measured"]) == ("fail", 4.39)  # 9.9 + 4.5 - 10.01; the 9.0 step ended before
