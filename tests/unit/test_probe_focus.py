"""Focus (probes/focus.py): how many flows may be probed harder after a loss, and which."""

from collections import defaultdict

from twin.probes.focus import Focus


def test_the_budget_is_a_quarter_of_the_flows_and_never_takes_the_mesh_over_max_pps():
    # rail4's 101 flows at 100 ms: 1,010 probes/s; a focused flow sends up to 40 a second
    assert Focus.budget_for(101, 4, 100, 1010, 5000) == 25
    assert Focus.budget_for(101, 4, 100, 1010, 1250) == 6
    assert Focus.budget_for(101, 4, 100, 1010, 1000) == 0  # already over: no focus at all
    assert Focus.budget_for(12, 4, 100, 120, 5000) == 8  # a small lab: a lossy path's suspects need a few
    assert Focus.budget_for(101, 1, 100, 1010, 5000) == 0  # focus off


def crossing(hops):
    index = defaultdict(list)
    for flow, path in hops.items():
        for hop in path:
            index[hop].append(flow)
    return index


def test_the_flows_that_lost_and_those_over_one_suspect_alone_are_focused():
    """The lossy flow crosses l1, l2, l3 (each one way): a flow over l1 alone tells l1 from the
    others, one over l1 and l2 less; the same links the other way round are not suspect."""
    hops = {"lost": (("l1", "a"), ("l2", "b"), ("l3", "c")),
            "l1 and l2": (("l1", "a"), ("l2", "b"), ("l9", "z")),
            "l1 alone": (("l1", "a"), ("l7", "y")),
            "l3 alone": (("l3", "c"), ("l8", "y")),
            "other way": (("l3", "b"), ("l2", "a")),
            "none": (("l7", "x"),)}
    focus = Focus(times=4, budget=8)
    assert focus.observe(10.0, ["lost"], hops, crossing(hops))
    assert focus.focused() == ["l1 alone", "l1 and l2", "l3 alone", "lost"]
    assert focus.times_of("lost") == 4 and focus.times_of("none") == 1
    focus = Focus(times=4, budget=2)
    focus.observe(10.0, ["lost"], hops, crossing(hops))
    assert focus.focused() == ["l1 alone", "lost"]  # the flow that lost first, then one per suspect
    assert not focus.observe(11.0, [], hops, crossing(hops))  # held
    assert focus.observe(12.5, [], hops, crossing(hops)) and not focus.focused()  # let go after hold_s
