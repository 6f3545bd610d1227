"""`twin e2e --generated`: the drills it writes are valid lab and scenario files of every kind,
reproducible from the seed, with faults where probed traffic goes."""

from twin.probes.selection import cover_plan
from twin.run.generate import KINDS, generate, score
from twin.run.plan import load_scenario


def test_generated_drills_load_cover_every_kind_and_repeat_from_the_seed(tmp_path):
    drills = generate(2 * len(KINDS), seed=7, folder=tmp_path / "a")
    assert {d.kind.split("<")[0].split(":")[0] for d in drills} == set(KINDS)  # gpu:rank_hang is a gpu drill
    shapes = set()
    for drill in drills:
        plan = load_scenario(drill.scenario)  # the run's own validation: file, line and hint on error
        fabric = plan.fabric
        shapes.add((len(fabric.switches), len(fabric.hosts), len(fabric.links)))
        covering = cover_plan(fabric, 3, seed=int(drill.lab.split("-")[1]))
        crossed = {name for name, _to in covering.expected.crossings}
        on_paths = {to for flow in covering.expected.flows for _name, to in covering.drawn[flow]}
        for fault in plan.faults:
            params = fault.params
            if hasattr(params, "link"):
                assert params.link in crossed  # a link no probed path crosses would lose nothing
            else:
                assert params.node in on_paths
        assert (not plan.faults) == (drill.kind == "healthy")
    assert len(shapes) > 5  # the shapes vary
    again = generate(2 * len(KINDS), seed=7, folder=tmp_path / "b")
    assert [(d.scenario.read_text(), d.kind) for d in again] == [(d.scenario.read_text(), d.kind) for d in drills]
    assert [d.scenario.read_text() for d in generate(3, seed=8, folder=tmp_path / "c")] != \
        [d.scenario.read_text() for d in drills[:3]]


class _Outcome:
    def __init__(self, report):
        self.report = report


def test_scores_per_kind_count_faults_verdicts_and_times():
    from types import SimpleNamespace as NS

    from twin.run.generate import Drill

    graded = NS(right=2, wrong=1, detect_s={"a": 1.5, "b": 2.5}, after_end=0)
    drills = [Drill(None, "two_faults", "gen-01"), Drill(None, "healthy", "gen-02"), Drill(None, "bitflip", "gen-03")]
    outcomes = [_Outcome(NS(faults=[1, 2], duration_s=20.0, detectors={"probe-localizer": graded})),
                _Outcome(NS(faults=[], duration_s=40.0,
                            detectors={"probe-localizer": NS(right=0, wrong=0, detect_s={}, after_end=3)})),
                _Outcome(None)]  # a drill that errored counts as run, with nothing graded
    rows = {row.kind: row for row in score(drills, outcomes, "probe-localizer")}
    two = rows["two_faults"]
    assert (two.faults, two.found, two.precision, two.recall, two.median_s()) == (2, 2, 0.667, 1.0, 2.0)
    assert rows["healthy"].healthy_s == 40.0 and rows["healthy"].precision is None
    assert rows["healthy"].after_end == 3 and two.after_end == 0  # late verdicts shown, never graded
    assert rows["bitflip"].drills == 1 and rows["bitflip"].faults == 0
