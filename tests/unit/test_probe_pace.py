"""Pacing: the selected flows over thinly crossed link directions are probed more than once an
interval until every direction carries the floor, the flows over the most short directions first."""

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from twin.probes.pace import MOST_PATHS_TIMES, extra_probes, floor_per_interval, paces
from twin.probes.select import Selection

A, B, C, D = ("a", "x"), ("b", "x"), ("c", "x"), ("d", "x")  # directed hops


def probes_over(flows, paths, times):
    return Counter({hop: 0 for flow in flows for hop in paths[flow]}) + Counter(
        hop for flow in flows for hop in set(paths[flow]) for _ in range(times.get(flow, 1)))


def test_the_flow_over_two_short_directions_is_paced_before_two_flows_over_one_each():
    paths = {("s", "d", 1): (A, B), ("s", "d", 2): (A,), ("s", "d", 3): (B,), ("s", "d", 4): (C,),
             ("s", "d", 5): (C,), ("s", "d", 6): (C,)}
    times = paces(list(paths), paths, floor=3)
    assert times == {("s", "d", 1): 2}  # A and B each 2 -> 3 with one more probe an interval
    assert extra_probes(times) == 1


def test_a_direction_one_flow_crosses_is_raised_by_that_flow_alone():
    paths = {("s", "d", 1): (A,), ("s", "d", 2): (B,), ("s", "d", 3): (B,), ("s", "d", 4): (B,)}
    assert paces(list(paths), paths, floor=3) == {("s", "d", 1): 3}


def test_nothing_is_paced_where_every_direction_carries_the_floor_or_the_floor_is_off():
    paths = {("s", "d", n): (A, B) for n in range(4)}
    assert paces(list(paths), paths, floor=4) == {}
    assert paces(list(paths), paths, floor=0) == {}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 8))
def test_every_direction_reaches_the_floor_with_no_more_probes_than_the_directions_lack(seed, floor):
    rng = random.Random(seed)
    hops = [(f"l{n}", "x") for n in range(12)]
    paths = {("s", "d", n): tuple(rng.sample(hops, rng.randint(1, 4))) for n in range(rng.randint(1, 20))}
    times = paces(list(paths), paths, floor)
    probes = probes_over(list(paths), paths, times)
    assert all(count >= floor for count in probes.values())
    before = probes_over(list(paths), paths, {})
    assert extra_probes(times) <= sum(max(0, floor - count) for count in before.values())
    assert all(t > 1 for t in times.values())


def test_the_floor_follows_the_rate_and_never_asks_more_than_twice_paths_per_link():
    assert floor_per_interval(60, 100, 3) == 6
    assert floor_per_interval(60, 30, 3) == 2  # already 3 paths a direction: nothing paced
    assert floor_per_interval(60, 1000, 3) == MOST_PATHS_TIMES * 3
    assert floor_per_interval(0, 100, 3) == 0


def test_a_paced_selection_reports_probes_a_direction_not_flows():
    paths = {("s", "d", 1): (A, B), ("s", "d", 2): (A,), ("s", "d", 3): (B, D)}
    selection = Selection(list(paths), Counter(hop for path in paths.values() for hop in path))
    assert selection.summary(3, 1)["links_min"] == 1  # D: one flow
    selection.pace(paths, 2)
    summary = selection.summary(3, 1)
    assert summary["links_min"] == 2 and summary["paced_flows"] == 1 and summary["paced_probes"] == 1
    assert selection.times_of(("s", "d", 3)) == 2 and selection.times_of(("s", "d", 2)) == 1


def test_a_direction_too_few_paths_cross_stays_short_however_often_its_flow_is_probed():
    paths = {("s", "d", 1): (A, B), ("s", "d", 2): (B,), ("s", "d", 3): (B,)}
    selection = Selection(list(paths), Counter(hop for path in paths.values() for hop in path))
    selection.pace(paths, 3)
    summary = selection.summary(2, 2)
    assert summary["links_min"] == 3 and summary["hops_covered"] == 1  # A: one path, probed 3 times
