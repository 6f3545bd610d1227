"""Training sessions without a lab: the pools, grading, scores, hints, runbooks, sealing, briefing."""

import json
import re

import pytest

from twin.errors import TwinError
from twin.faults import engine
from twin.faults.registry import FAULTS, kinds
from twin.lab.files import open_lab
from twin.lab.state import LabState, load_state
from twin.seal import key_of, new_key, seal, unseal
from twin.train import hints, pools
from twin.train.briefing import briefing
from twin.train.trainee import TrainingSession, grade, load_scores, record_score


@pytest.fixture(scope="module")
def rail4():
    return open_lab("rail4")[1]


@pytest.fixture(scope="module")
def mini():
    return open_lab("mini")[1]


def test_same_seed_same_fault_other_seeds_differ(rail4):
    assert pools.draw(rail4, 2, 7) == pools.draw(rail4, 2, 7)
    assert len({json.dumps(pools.draw(rail4, 2, seed)) for seed in range(20)}) > 5


@pytest.mark.parametrize("level, allowed", [
    (1, {"link_down", "switch_down", "bgp_down"}),
    (2, {"silent_drop", "bitflip", "blackhole", "slow_node"}),
    (3, {"silent_drop", "bitflip", "blackhole", "slow_node", "pfc_storm"}),
    (4, {"mtu_mismatch", "ecmp_width", "hash_policy", "peer_mismatch", "route_filter", "miswire"}),
    (5, {"rank_hang", "rank_crash", "slow_compute"}),
])
def test_each_level_draws_from_its_pool_only(rail4, mini, level, allowed):
    for fabric in (rail4, mini):
        drawn = [e for seed in range(40) for e in pools.draw(fabric, level, seed)]
        assert {e["kind"] for e in drawn} <= allowed
        assert all(re.fullmatch(r"t\d", e["id"]) for e in drawn)  # ids that say nothing


def test_level4_draws_every_misconfiguration_and_each_would_change_something(rail4, mini):
    for fabric in (rail4, mini):
        drawn = [e for seed in range(40) for e in pools.draw(fabric, 4, seed)]
        cabling = {"miswire"} if fabric.rails >= 2 else set()  # one NIC a host: no second cable
        assert {e["kind"] for e in drawn} == {"mtu_mismatch", "ecmp_width", "hash_policy", "peer_mismatch",
                                              "route_filter"} | cabling
        for entry in drawn:
            timing, params = engine.parse(entry)
            assert FAULTS.get(entry["kind"]).check(fabric, params, None) == [], entry


def test_level3_covers_partial_drops_storms_pairs_and_superspines(rail4):
    sessions = [pools.draw(rail4, 3, seed) for seed in range(60)]
    assert any(e.get("flows_pct") for s in sessions for e in s)
    assert any(e["kind"] == "pfc_storm" and e["propagate"] for s in sessions for e in s)
    assert any(len(s) == 2 for s in sessions)
    assert any("superspine" in e.get("link", "") for s in sessions for e in s)


def _session():
    return TrainingSession(lab="rail4", trainee="t", level=2, injected=1000.0)


FAULT = {"id": "t1", "kind": "silent_drop", "link": "leaf-g1-r1 -- spine-r1-s1", "loss_pct": 5}


def test_grading_needs_place_and_kind_either_link_order():
    session = _session()
    assert not grade(session, [FAULT], "silent_drop", "leaf-g1-r2 -- spine-r2-s1", None).location_right
    kind_wrong = grade(session, [FAULT], "bitflip", "spine-r1-s1 -- leaf-g1-r1", None)
    assert kind_wrong.location_right and not kind_wrong.right
    assert grade(session, [FAULT], "silent_drop", "spine-r1-s1 -- leaf-g1-r1", None).right
    assert session.finished and session.found == ["t1"]
    assert session.score == 100 - 2 * 10


def test_two_faults_need_two_right_answers_and_hints_cost():
    second = {"id": "t2", "kind": "slow_node", "node": "host-g2-h1", "rate_pct": 20}
    session = _session()
    session.hints = 2
    assert grade(session, [FAULT, second], "slow_node", None, "host-g2-h1").right
    assert not session.finished
    assert grade(session, [FAULT, second], "silent_drop", FAULT["link"], None).right
    assert session.finished and session.score == 100 - 2 * 15


def test_a_revealed_unfinished_session_scores_zero_and_history_is_per_trainee(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRIC_TWIN_SCORES", str(tmp_path))
    session = _session()
    session.revealed = True
    record_score(session, {"seed": 3, "faults": [FAULT]})
    session.trainee = "other"
    record_score(session, {"seed": 4, "faults": [FAULT]})
    scores = load_scores(None)
    assert sorted(scores) == ["other", "t"] and scores["t"][0]["score"] == 0 and scores["t"][0]["seed"] == 3
    assert list(load_scores("other")) == ["other"]


def test_every_fault_kind_has_a_complete_runbook():
    for kind in kinds():
        text = FAULTS.get(kind).runbook.read_text()
        for section in ("## Symptoms", "## What reveals it", "## How production tooling finds it",
                        "## Mitigation", "## Hints"):
            assert section in text, f"{kind}: {section}"
        assert len(hints.runbook_hints(kind)) >= 2, kind


def test_hints_go_from_what_to_where_then_run_out(rail4):
    sequence = [hints.hint(rail4, FAULT, n) for n in range(5)]
    assert sequence[0] == hints.runbook_hints("silent_drop")[0]
    assert sequence[1] == "Look at the links between the leaf and spine tiers."
    assert sequence[3] == "One end of it is leaf-g1-r1."
    assert sequence[4] is None


def test_seal_round_trip_and_a_changed_blob_or_another_key_is_refused(tmp_path):
    (tmp_path / "other").mkdir()
    key = new_key(tmp_path)
    assert key_of(tmp_path) == key and (tmp_path / "training.key").stat().st_mode & 0o077 == 0
    blob = seal(key, '{"kind": "silent_drop"}')
    assert "silent" not in blob and unseal(key, blob) == '{"kind": "silent_drop"}'
    middle = len(blob) // 2
    tampered = blob[:middle] + ("A" if blob[middle] != "A" else "B") + blob[middle + 1:]
    for wrong_key, damaged in ((key, tampered), (new_key(tmp_path / "other"), blob), (key, "not a blob")):
        with pytest.raises(TwinError, match="does not match"):
            unseal(wrong_key, damaged)


def test_a_sealed_state_hides_its_faults_on_disk_and_loads_them_back(run_dir):
    state = LabState(lab="sealed", runtime="netns", lab_file="x")
    state.directory.mkdir(parents=True)
    new_key(state.directory)
    state.sealed = True
    state.faults.append(dict(FAULT))
    state.save()
    assert "silent_drop" not in (state.directory / "state.json").read_text()
    assert load_state("sealed").faults == [FAULT]
    (state.directory / "training.key").unlink()  # lost: teardown must still be able to read the state
    damaged = load_state("sealed")
    assert damaged.faults == [] and not damaged.sealed and damaged.resources == state.resources


def test_briefing_speaks_of_symptoms_not_causes():
    events = [{"kind": "fault", "op": "applied", "actual_s": 10.0, "t": 10.0}]
    events += [{"kind": "collective", "t": t / 2, "rank": t % 4, "step_s": 0.2, "comm_s": 0.05} for t in range(0, 20)]
    events += [{"kind": "collective", "t": 10.5 + t / 2, "rank": t % 4, "step_s": 0.3,
                "comm_s": 0.15 if t % 4 == 3 else 0.1} for t in range(20)]
    events += [{"kind": "probe", "t": 11.0, "sent": 100, "lost": 5,
                "lossy": ["host-g1-h1:nic1 -> host-g2-h1:nic1 :10001"]}]
    text = briefing(events, onset_wall=0.0)
    assert "step time up 50 %" in text and "ranks 3" in text
    assert "5.0 % of probes lost" in text and "host-g1-h1" in text
    assert "silent" not in text and "spine" not in text


def test_briefing_reports_a_hang_that_began_just_before_the_onset():
    events = [{"kind": "fault", "op": "applied", "actual_s": 8.0, "t": 8.0}]
    events += [{"kind": "collective", "t": t / 2, "rank": t % 2, "step_s": 0.3, "comm_s": 0.1} for t in range(16)]
    events += [{"kind": "collective", "t": 0.2, "rank": 2, "step_s": 0.3, "comm_s": 0.1}]
    events += [{"kind": "hang", "t": 7.9, "rank": r, "waited_s": 4.2} for r in (0, 1)]
    text = briefing(events, onset_wall=0.0)
    assert "hung at" in text and "timed out after 4 s" in text and "rank(s) 0, 1)" in text


def test_briefing_quotes_the_timeout_not_a_rank_whose_peer_gave_up_first():
    events = [{"kind": "fault", "op": "applied", "actual_s": 8.0, "t": 8.0}]
    events += [{"kind": "collective", "t": t / 2, "rank": t % 2, "step_s": 0.3, "comm_s": 0.1} for t in range(16)]
    events += [{"kind": "hang", "t": 8.1, "rank": 0, "waited_s": 1.4, "cause": "peer_closed"},
               {"kind": "hang", "t": 7.9, "rank": 1, "waited_s": 3.1, "cause": "timeout"}]
    assert "timed out after 3 s" in briefing(events, onset_wall=0.0)


def test_a_black_hole_is_found_at_its_switch_or_on_the_switch_link_toward_its_host():
    hole = {"id": "t1", "kind": "blackhole", "node": "leaf-g1-r1", "host": "host-g1-h1"}
    assert grade(_session(), [hole], "blackhole", None, "leaf-g1-r1").right
    assert grade(_session(), [hole], "blackhole", "host-g1-h1 -- leaf-g1-r1", None).right
    assert not grade(_session(), [hole], "blackhole", "leaf-g1-r1 -- spine-r1-s1", None).location_right
