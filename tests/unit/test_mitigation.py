"""Mitigation decisions without a lab: which links a dodging flow avoids and which source port it
takes, which links a drain refuses; and the quick drill's shortened timelines."""

import pytest
from test_model import fabric_of

from twin.lab.handle import Lab
from twin.lab.state import LabState
from twin.mitigate.dodge import links_to_avoid, pick
from twin.mitigate.drain import DrainError, drain
from twin.model.targets import TargetError
from twin.spec.quick import QUICK_LEAD_S, QUICK_PLAIN_S, QUICK_TAIL_S, shorten

HOST_A, HOST_B = "leaf-g1-r1 -- host-g1-h1", "leaf-g2-r1 -- host-g2-h1"
VIA_S1 = (HOST_A, "spine-r1-s1 -- leaf-g1-r1", "spine-r1-s1 -- leaf-g2-r1", HOST_B)
VIA_S2 = (HOST_A, "spine-r1-s2 -- leaf-g1-r1", "spine-r1-s2 -- leaf-g2-r1", HOST_B)


def test_a_flow_avoids_the_named_link_else_its_own_fabric_links():
    assert links_to_avoid(VIA_S1, {"leaf-g1-r1 -- spine-r1-s1"}) == ({"spine-r1-s1 -- leaf-g1-r1"},
                                                                     "named by a detector")
    avoid, because = links_to_avoid(VIA_S1, {"leaf-g1-r2 -- spine-r2-s1"})  # named, but not on this path
    assert avoid == set(VIA_S1[1:3]) and because == "the flow's own path"
    assert links_to_avoid((HOST_A, HOST_B), set())[0] == set()  # same leaf: nothing to dodge


def test_pick_takes_a_path_that_avoids_and_never_a_worse_or_unknown_one():
    avoid = {VIA_S1[1]}
    assert pick(avoid, VIA_S1, [VIA_S1, VIA_S2, VIA_S1]) == (1, VIA_S2)
    assert pick(avoid, VIA_S1, [VIA_S1, VIA_S1]) is None  # every port hashes onto the bad link
    unknown = (HOST_A, None, "spine-r1-s2 -- leaf-g2-r1", HOST_B)
    assert pick(avoid, VIA_S1, [unknown]) is None  # a hop that did not answer might be the bad link


def ctx(lab, drains=()):
    return Lab(fabric_of(lab), LabState(lab=lab, runtime="netns", lab_file="", drains=list(drains)), runtime=None)


@pytest.mark.parametrize("link, drained, message", [
    ("leaf-g1-r1 -- host-g1-h1", (), "is a host link"),
    ("leaf-g1-r1 -- spine-2", ("leaf-g1-r1 -- spine-1",), "would leave leaf-g1-r1 without a spine link"),
    ("spine-1 -- leaf-g1-r1", ("leaf-g1-r1 -- spine-1",), "is already drained"),
])
def test_drain_refusals_change_nothing(link, drained, message):
    context = ctx("mini", drained)
    with pytest.raises(DrainError, match=message):
        drain(context, link)
    assert context.state.drains == list(drained)  # refused before anything was recorded or run


def test_drain_of_an_unknown_link_names_the_neighbours():
    with pytest.raises(TargetError, match="no link between leaf-g1-r1 and leaf-g2-r1"):
        drain(ctx("mini"), "leaf-g1-r1 -- leaf-g2-r1")


def test_quick_moves_the_faults_together_and_keeps_their_durations():
    data = {"duration_s": 40, "faults": [{"at_s": 10, "duration_s": 5}, {"at_s": 12, "duration_s": 20}]}
    shorten(data)
    assert [(f["at_s"], f["duration_s"]) for f in data["faults"]] == [(QUICK_LEAD_S, 5), (QUICK_LEAD_S + 2, 20)]
    assert data["duration_s"] == QUICK_LEAD_S + 2 + 20 + QUICK_TAIL_S


def test_quick_keeps_a_fault_that_lasts_to_the_end_and_caps_plain_runs():
    data = {"duration_s": 30, "faults": [{"at_s": 10}]}
    shorten(data)
    assert data == {"duration_s": 30 - (10 - QUICK_LEAD_S), "faults": [{"at_s": QUICK_LEAD_S}]}
    plain = {"duration_s": 300}
    shorten(plain)
    assert plain["duration_s"] == QUICK_PLAIN_S
    bad = {"duration_s": "long", "faults": [{"at_s": 10}]}
    shorten(bad)  # left for validation to report, with its line
    assert bad == {"duration_s": "long", "faults": [{"at_s": 10}]}
