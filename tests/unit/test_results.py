"""Reports rebuilt from recorded results folders (tests/data/results: two runs of the shipped
silent-drop and timers scenarios on rail4, recorded by the version before run.json existed, with
the report.json it wrote). The analysis is a pure function of the folder: it must give the same
report again, from the old layout and from the current one (run.json + model.json).

Two things changed meaning since those folders were written: a fault window's `slowdown` was
the median step over the healthy median; it is now the mean step over it (lost throughput), and
the old figure is `median_slowdown`. And a collective's step belongs to a fault window when it
overlaps it (a step that began before the fault and stalled in it is the fault's, not the
healthy baseline's), where the older version took the steps that began in it: the collectives'
step figures are left out of the comparison (their expectations' statuses are compared), and
test_a_step_that_stalled_across_the_onset_is_the_faults holds the new rule."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from twin.errors import TwinError
from twin.results import record
from twin.results.analysis import analyse, recovered_by
from twin.results.publish import publish
from twin.results.workloads import collectives, probes

DATA = Path(__file__).resolve().parents[1] / "data" / "results"
RUNS = sorted(p.name for p in DATA.iterdir() if (p / "report.json").is_file())  # folders of older versions


def unpacked(name: str, into: Path) -> Path:
    folder = into / name
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(gzip.decompress((DATA / name / "events.jsonl.gz").read_bytes()))
    shutil.copy(DATA / name / "report.json", folder / "report.json")
    return folder


def same(old: dict, new: dict) -> bool:
    """Equal, where a key absent on one side and None on the other counts as equal."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = {k for k in set(old) | set(new) if old.get(k) is not None or new.get(k) is not None}
        return all(same(old.get(k), new.get(k)) for k in keys)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(same(a, b) for a, b in zip(old, new))
    return old == new


def _windows(report: dict):
    for collective in report["collectives"].values():
        yield collective["baseline"]
        yield from collective["fault_windows"]


def as_median_slowdown(old: dict) -> dict:
    """An older report in this version's terms: its slowdown is today's median_slowdown."""
    for window in _windows(old):
        if "slowdown" in window:
            window["median_slowdown"] = window.pop("slowdown")
    return old


def without_new_fields(new: dict) -> dict:
    """This version's report less what older ones did not compute (mean step, throughput slowdown,
    and the figure a `collective` expectation measures with it; verdicts after the end; what of
    the folder could not be read; ECN marks; packets adaptive routing moved; ranks crashed and restarted;
    faults only localized to a set of candidates; QPs' moves to another path offset)."""
    new.pop("damaged", None)
    new.pop("balance", None)
    if new.get("fabric"):
        for name in ("ecn_marked", "steered"):
            new["fabric"].pop(name, None)
            for window in new["fabric"]["fault_windows"]:
                window.pop(name, None)
    for score in new["detectors"].values():
        score.pop("after_end", None)
        score.pop("candidates", None)
    for window in _windows(new):
        window.pop("slowdown", None)
        window.pop("mean_step_s", None)
        window.pop("step_cv", None)
    for collective in new["collectives"].values():  # the RoCE transport's congestion control
        collective.pop("rank_exits", None)  # ranks a fault crashed and the launcher restarted
        for totals in [collective.get("transport_totals")] + [w.get("transport") for w in collective["fault_windows"]]:
            for name in ("ecn_marked", "cnps_sent", "cnps_received", "out_of_order", "tail_probes", "dodges"):
                (totals or {}).pop(name, None)
    for expectation in new["expectations"]:
        if expectation["kind"] == "collective":
            expectation["measured"] = expectation["message"] = None
    return new


@pytest.mark.parametrize("name", RUNS)
def test_an_older_folder_gives_back_its_report(name, tmp_path):
    folder = unpacked(name, tmp_path)
    old = json.loads((folder / "report.json").read_text())
    run = record.load(folder)
    assert run.legacy
    new = without_new_fields(json.loads(analyse(run).to_json()))
    assert [(e["kind"], e["status"]) for e in new["expectations"]] == \
        [(e["kind"], e["status"]) for e in old["expectations"]]
    assert [e["measured"] for e in new["expectations"] if e["kind"] != "collective"] == \
        [e["measured"] for e in old["expectations"] if e["kind"] != "collective"]
    assert new["detectors"] == old["detectors"]
    old = as_median_slowdown(old)
    for expectation in old["expectations"]:
        if expectation["kind"] == "collective":
            expectation["measured"] = expectation["message"] = None
    assert same(without_step_figures(old), without_step_figures(without_new_fields(new)))


def without_step_figures(report: dict) -> dict:
    """The report less its collectives' step figures (healthy baseline, fault windows), which now
    count the steps overlapping a window rather than those that began in it."""
    for collective in report["collectives"].values():
        collective.pop("baseline", None)
        collective.pop("fault_windows", None)
    return report


def test_the_throughput_slowdown_counts_the_long_steps():
    """A window of mostly healthy steps and one retransmission timeout: the median says healthy,
    the mean says what the job lost."""
    steps = [{"kind": "collective", "workload": "train-0", "gen": 0, "iter": i, "t": float(i), "rank": 0,
              "step_s": 9.0 if i == 13 else 1.0, "busbw_Bps": 1.0, "wrong": 0} for i in range(1, 25)]
    (window,) = collectives(steps, [(10.5, 15.5)])["train-0"]["fault_windows"]  # steps 10..15 overlap it
    assert window["median_slowdown"] == 1.0 and window["slowdown"] == round((5 * 1 + 9) / 6, 3)


def test_a_step_that_stalled_across_the_onset_is_the_faults():
    """Steps of 1 s, and one that began 0.5 s before the fault and waited through it (a black
    hole and NCCL's timers): the window holds it, the healthy baseline does not."""
    steps = [{"kind": "collective", "workload": "train-0", "gen": 0, "iter": i, "t": float(i), "rank": 0,
              "step_s": 1.0, "busbw_Bps": 1.0, "wrong": 0, "timeouts": 0} for i in range(1, 10)]
    steps.append({**steps[-1], "iter": 10, "t": 9.5, "step_s": 13.0, "timeouts": 2})
    steps += [{**steps[0], "iter": i, "t": 22.5 + i - 11} for i in range(11, 15)]
    result = collectives(steps, [(10.0, 22.0)])["train-0"]
    (window,) = result["fault_windows"]
    assert window["iterations"] == 1 and window["max_step_s"] == 13.0 and window["slowdown"] == 13.0
    assert result["baseline"]["max_step_s"] == 1.0


def test_the_loss_while_a_clear_s_routes_settle_is_not_healthy():
    """A switch brought back at 11 s: its routes settle 2.5 s later, and the probes lose until
    then. Those intervals are the fault's recovery, not the healthy baseline; the ones after it are."""
    rows = [{"kind": "probe", "t": 0.5 * i, "span_s": 0.5, "sent": 100, "lost": 50 if 10 <= 0.5 * i < 13.5 else 0}
            for i in range(40)]
    assert probes(rows, [(5.0, 11.0)])["baseline"]["lost"] == 50  # 13-13.5 s, after the fixed 2 s
    fault = SimpleNamespace(restored_after_s=2.5)
    settled = [recovered_by(11.0, fault)]
    assert settled == [14.5]
    assert probes(rows, [(5.0, 11.0)], settled)["baseline"] == {"intervals": 21, "sent": 2100, "lost": 0,
                                                                "loss_pct": 0.0}
    assert recovered_by(11.0, SimpleNamespace(restored_after_s=None)) == 13.0


@pytest.mark.parametrize("name", RUNS)
def test_the_current_layout_gives_the_same_report(name, tmp_path):
    """run.json + model.json written from the older folder, its report.json gone: the fault
    timings now come from the fault events alone."""
    legacy = record.load(unpacked(name, tmp_path))
    expected = json.loads(analyse(legacy).to_json())
    current = tmp_path / "current"
    current.mkdir()
    shutil.copy(legacy.path / "events.jsonl", current / "events.jsonl")
    record.write(current, legacy.record, legacy.fabric)
    run = record.load(current)
    assert not run.legacy and run.fabric.name == "rail4"
    assert json.loads(analyse(run).to_json()) == expected


def test_publish_writes_every_file_and_the_page_links_them(tmp_path):
    folder = unpacked("timers", tmp_path)
    report = publish(folder)
    assert report.passed
    for name in ("report.json", "junit.xml", "timeline.png", "topology.png", "index.html"):
        assert (folder / name).stat().st_size > 0, name
    assert "events.jsonl" in (folder / "index.html").read_text()
    assert 'failures="0"' in (folder / "junit.xml").read_text()


def test_a_changed_event_changes_the_grade(tmp_path):
    """The report is computed, not copied: a verdict that came later fails the detect limit."""
    folder = unpacked("silent-drop", tmp_path)
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    for event in events:
        if event["kind"] == "verdict":
            event["received_t"] = event["t"] = event["t"] + 10.0
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    report = analyse(record.load(folder))
    detect = next(e for e in report.expectations if e.kind == "detect")
    assert detect.status == "fail" and not report.passed


def test_a_folder_without_a_run_says_so(tmp_path):
    with pytest.raises(TwinError, match="no events.jsonl"):
        record.load(tmp_path)
    (tmp_path / "events.jsonl").write_text("")
    with pytest.raises(TwinError, match="neither run.json nor report.json"):
        record.load(tmp_path)


def test_verdicts_after_the_end_are_reported_but_not_graded():
    from twin.results.grading import detectors
    from twin.results.report import FaultWindow
    link = "leaf-g1-r1 -- spine-1"
    fault = FaultWindow(id="drop", kind="silent_drop", scheduled_s=5.0, applied_s=5.0, apply_took_s=0.01)
    verdict = {"kind": "verdict", "detector": "probe-localizer", "verdict_kind": "silent_drop"}
    records = [{**verdict, "t": 6.0, "link": link},
               {**verdict, "t": 29.0, "link": "leaf-g2-r1 -- spine-2"},  # wrong, while the scenario ran
               {**verdict, "t": 31.0, "link": "leaf-g2-r1 -- host-g2-h1"},  # after the end (30 s)
               {**verdict, "t": 33.5, "link": "leaf-g1-r1 -- host-g1-h1"}]
    score = detectors(records, [fault], {"drop": [link]}, 30.0)["probe-localizer"]
    assert (score.verdicts, score.right, score.wrong, score.after_end) == (2, 1, 1, 2)
    assert score.detect_s == {"drop": 0.99}
    # An interrupted run ends where it was interrupted.
    stopped = detectors([{"kind": "scenario", "op": "interrupted", "t": 20.0}, *records],
                        [fault], {"drop": [link]}, 30.0)["probe-localizer"]
    assert (stopped.verdicts, stopped.wrong, stopped.after_end) == (1, 0, 3)


def test_faults_due_together_are_on_schedule_when_applied_one_after_another():
    """The engine applies faults due at one moment in turn: the second is late by the first's
    apply, not off schedule; a fault that started late on its own still is."""
    from twin.results.analysis import _engine_free, _fault_window
    from twin.results.record import FaultTiming
    first = FaultTiming(id="a", kind="silent_drop", scheduled_s=6.0, applied_s=6.0003, apply_took_s=0.052)
    second = FaultTiming(id="b", kind="silent_drop", scheduled_s=6.0, applied_s=6.0524, apply_took_s=0.03)
    alone = FaultTiming(id="c", kind="silent_drop", scheduled_s=8.0, applied_s=8.0824, apply_took_s=0.03)
    free = _engine_free([first, second, alone])
    windows = {t.id: _fault_window(t, [], [], 20.0, free.get(t.id)) for t in (first, second, alone)}
    assert windows["a"].on_schedule and windows["b"].on_schedule and not windows["c"].on_schedule
    assert windows["b"].schedule_error_s == 0.0524  # the figure reported stays the raw one
