"""The lab state under concurrent use: every process's changes survive the others' saves (a
fault injected while `twin probe` records its agents was lost from the state, while its nft
tables stayed in the kernel). Real files and real processes, in a private run directory."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from twin.lab.state import LabState, Resource, lab_dir, load_state


@pytest.fixture(autouse=True)
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRIC_TWIN_RUN_DIR", str(tmp_path))


def _new(name="lab1") -> LabState:
    state = LabState(lab=name, runtime="netns", lab_file="labs/mini.yaml", status="up")
    state.save()
    return state


def test_two_holders_keep_each_others_changes():
    _new()
    injector, prober = load_state("lab1"), load_state("lab1")  # both loaded before either writes
    record = {"id": "bad-optic", "kind": "silent_drop", "undo": {}}
    injector.faults.append(record)
    injector.save()
    prober.record(Resource("worker", "probe-agent-1", pid=123))
    on_disk = load_state("lab1")
    assert [f["id"] for f in on_disk.faults] == ["bad-optic"]
    assert [r.name for r in on_disk.resources] == ["probe-agent-1"]
    record["undo"]["table"] = "ftw_bad-optic"  # the injector fills in its record after the save
    injector.save()
    assert load_state("lab1").faults[0]["undo"] == {"table": "ftw_bad-optic"}
    assert [r.name for r in injector.resources] == ["probe-agent-1"]  # it now sees the other's change


def test_a_holder_that_saw_a_record_half_filled_does_not_write_it_back():
    # The run refreshed while the fault applier had written its fault's intent but not yet what
    # undoes it; the applier then filled the record in. The run's next save must not put the
    # half-filled record back, nor, once the applier cleared the fault, bring it back half-filled: the
    # run's final clear-all then failed on KeyError 'ports' (generated drill g32-two-faults).
    _new()
    applier, run = load_state("lab1"), load_state("lab1")
    entry = {"id": "grey", "kind": "silent_drop", "record": {}}
    applier.faults.append(entry)
    applier.save()
    run.refresh()
    entry["record"]["ports"] = [{"node": "leaf-g1-r1", "ifname": "sp-1"}]
    applier.save()
    run.refresh()
    assert run.faults[0]["record"]["ports"], run.faults  # it holds what is on disk
    run.drains.append("leaf-g1-r1 -- spine-1")
    run.save()
    assert load_state("lab1").faults[0]["record"]["ports"] == [{"node": "leaf-g1-r1", "ifname": "sp-1"}]
    entry["record"]["ports"].append({"node": "spine-1", "ifname": "lf-g1r1"})  # the filler's object
    applier.save()  # is still the one in its list
    assert len(load_state("lab1").faults[0]["record"]["ports"]) == 2
    applier.faults.clear()  # cleared on schedule; the run's next save must not bring it back
    applier.save()
    run.drains.clear()
    run.save()
    assert load_state("lab1").faults == []


def test_a_stale_holder_does_not_bring_back_what_another_removed():
    _new()
    clearer, stale = load_state("lab1"), None
    clearer.faults.append({"id": "f1", "kind": "link_down"})
    clearer.save()
    stale = load_state("lab1")
    clearer.faults.clear()
    clearer.save()
    stale.status = "up"
    stale.drains.append("leaf-g1-r1 -- spine-1")
    stale.save()
    state = load_state("lab1")
    assert state.faults == [] and state.drains == ["leaf-g1-r1 -- spine-1"]


def test_a_field_one_holder_sets_wins_and_others_are_kept():
    _new()
    a, b = load_state("lab1"), load_state("lab1")
    a.status = "tearing-down"
    a.save()
    b.timings_s["converge"] = 2.5
    b.save()
    state = load_state("lab1")
    assert state.status == "tearing-down" and state.timings_s == {"converge": 2.5}


def _hammer(run_dir: str, worker: int, count: int) -> None:
    import os
    os.environ["FABRIC_TWIN_RUN_DIR"] = run_dir
    state = load_state("lab1")  # held for the whole loop, like a long-running command
    for i in range(count):
        state.faults.append({"id": f"w{worker}-{i}", "kind": "silent_drop"})
        state.save()
        state.record(Resource("worker", f"agent-{worker}-{i}"))
        if i % 2:
            state.faults[:] = [f for f in state.faults if f["id"] != f"w{worker}-{i}"]
            state.save()


def test_processes_saving_at_once_lose_nothing(tmp_path):
    _new()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_hammer, args=(str(tmp_path), w, 40)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
    assert all(p.exitcode == 0 for p in workers)
    state = load_state("lab1")
    assert sorted(f["id"] for f in state.faults) == sorted(f"w{w}-{i}" for w in range(4) for i in range(0, 40, 2))
    assert len(state.resources) == 4 * 40
    assert json.loads((lab_dir("lab1") / "state.json").read_text())["lab"] == "lab1"
    assert not list(lab_dir("lab1").glob("*.tmp"))  # every write was renamed into place
