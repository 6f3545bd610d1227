"""Which discovered flows the cover mesh probes (select.py), and how a discovered path is oriented."""

from test_model import fabric_of

from twin.probes.select import Directions, _routes, routes_of, select


def hops(*names):
    """Links named 'l -- l'' leading to a node of their own, l'."""
    return tuple((link(name), f"{name}'") for name in names)


def link(name):
    return f"{name} -- {name}'"


def links_only(groups):
    return [tuple(name for name in group if " -- " in name) for group in groups]


def test_every_hop_is_crossed_k_times_by_distinct_paths():
    paths = {("a", "b", 1): hops("up", "s1", "down"), ("a", "b", 2): hops("up", "s1", "down"),  # one path, twice
             ("a", "b", 3): hops("up", "s2", "down"), ("a", "b", 4): hops("up", "s3", "down"),
             ("c", "b", 5): hops("up2", "s1", "down"), ("c", "b", 6): hops("up2", "s2", "down")}
    chosen = select(paths, 2)
    assert ("a", "b", 1) in chosen.flows and ("a", "b", 2) not in chosen.flows  # the same path once
    for hop, count in chosen.crossings.items():
        assert count >= min(2, sum(1 for flow in {1, 3, 4, 5, 6} for h in paths[_key(paths, flow)] if h == hop))
    # s3 has one distinct path: short of k=2, and said so
    assert chosen.short == [(link("s3"), "s3'")]


def _key(paths, sport):
    return next(k for k in paths if k[2] == sport)


def test_links_probed_by_the_same_flows_are_split_when_a_candidate_can():
    # Greedy takes 1 and 2 (every hop once); flow 3 adds no hop, but it crosses l1 without l2 and
    # l3: it is added so that a loss on l1 is not blamed on l2. l2 and l3 no flow tells apart.
    paths = {("a", "b", 1): hops("l1", "l2", "l3"), ("a", "b", 2): hops("l4"), ("a", "c", 3): hops("l1")}
    chosen = select(paths, 1)
    assert ("a", "c", 3) in chosen.flows
    assert links_only(chosen.ambiguous) == [(link("l2"), link("l3"))]
    del paths[("a", "c", 3)]
    assert links_only(select(paths, 1).ambiguous) == [(link("l1"), link("l2"), link("l3"))]


def test_switches_probed_by_the_same_flows_are_split_by_a_path_over_one_of_them():
    # Two leaves A and B: every cross-leaf flow crosses both; A's own pair (1 hop, over A alone)
    # adds no hop to cover, and is taken so that a dead A is not named as B.
    up, down = ("hA -- A", "A"), ("hB -- B", "hB")
    paths = {("a", "b", 1): (up, ("A -- S", "S"), ("B -- S", "B"), down),
             ("b", "a", 2): (("hB -- B", "B"), ("B -- S", "S"), ("A -- S", "A"), ("hA -- A", "hA")),
             ("a", "a2", 3): (up, ("hA2 -- A", "hA2"))}
    chosen = select(paths, 1)
    assert ("a", "a2", 3) in chosen.flows
    assert not any({"A", "B"} <= set(group) for group in chosen.ambiguous)
    del paths[("a", "a2", 3)]
    assert any({"A", "B"} <= set(group) for group in select(paths, 1).ambiguous)


def test_selection_grows_with_links_when_candidates_grow_with_pairs():
    # 40 NICs all sending to each other over a shared core: candidates grow with pairs (1560),
    # the selection with hops (each NIC's up and down hop k times, core hops k times).
    paths = {}
    for s in range(40):
        for d in range(40):
            if s != d:
                paths[(f"n{s}", f"n{d}", 1)] = ((f"up{s}", "x"), (f"core{(s + d) % 4}", "x"), (f"down{d}", "x"))
    chosen = select(paths, 2)
    # each flow serves one up and one down hop; balancing adds at most one more per NIC where
    # its two flows share a core hop (a core hop on both of a link's paths: no loss tells them apart)
    assert len(chosen.flows) <= 3 * 40
    assert min(chosen.crossings.values()) >= 2 and not chosen.short


def test_a_discovered_path_is_oriented_hop_by_hop_and_across_unanswered_hops():
    fabric = fabric_of("rail4")
    directions = Directions(fabric)
    src, dst = "host-g1-h1:nic1", "host-g2-h1:nic2"
    links = ("leaf-g1-r1 -- host-g1-h1", "spine-r1-s1 -- leaf-g1-r1", "superspine-1 -- spine-r1-s1",
             "superspine-1 -- spine-r2-s2", "spine-r2-s2 -- leaf-g2-r2", "leaf-g2-r2 -- host-g2-h1")
    expected = (("leaf-g1-r1 -- host-g1-h1", "leaf-g1-r1"), ("spine-r1-s1 -- leaf-g1-r1", "spine-r1-s1"),
                ("superspine-1 -- spine-r1-s1", "superspine-1"), ("superspine-1 -- spine-r2-s2", "spine-r2-s2"),
                ("spine-r2-s2 -- leaf-g2-r2", "leaf-g2-r2"), ("leaf-g2-r2 -- host-g2-h1", "host-g2-h1"))
    assert directions.hops(src, links, dst) == expected
    # The superspine did not answer: the hop is unknown, the next one still points down.
    gap = (links[0], links[1], None, links[3], links[4], links[5])
    assert directions.hops(src, gap, dst) == expected[:2] + expected[3:]


def test_the_groups_kept_by_refinement_are_those_computed_from_scratch():
    import random

    from twin.probes.select import _Partition, _signatures, confusable, elements
    rng = random.Random(5)
    options = {(f"h{n}", f"h{n + 1}", n): tuple((f"l{rng.randrange(40)}", rng.choice("ab"))
                                               for _ in range(rng.randrange(1, 6))) for n in range(200)}
    partition, chosen = _Partition(), []
    for flow in rng.sample(sorted(options), 80):
        chosen.append(flow)
        partition.add(elements(options[flow]))
        expected = sorted(sorted(names) for names in _signatures(options, chosen).values() if confusable(names))
        assert sorted(sorted(links) for links in partition.groups()) == expected


def test_no_link_lies_on_more_than_half_of_another_links_paths_where_a_flow_can_change_that():
    # Cover alone takes a's two flows over the uplink F (and b's two over G): F's losses would
    # all fall on a's host link too. Balancing adds b's flows over F until a is on half of them.
    # d's host link is on every candidate over F: it cannot be balanced and adds nothing.
    paths = {("a", "d", 1): hops("ha", "F", "s1", "hd"), ("a", "d", 2): hops("ha", "F", "s2", "hd"),
             ("b", "d", 3): hops("hb", "G", "s1", "hd"), ("b", "d", 4): hops("hb", "G", "s2", "hd"),
             ("b", "d", 5): hops("hb", "F", "s1", "hd"), ("b", "d", 6): hops("hb", "F", "s2", "hd")}
    chosen = select(paths, 2)
    over_f = [flow for flow in chosen.flows if (link("F"), "F'") in paths[flow]]
    assert len(over_f) == 4 and sum(1 for flow in over_f if flow[0] == "a") == 2
    assert len(chosen.flows) == 6


def test_every_route_a_candidate_tests_is_tested_by_a_selected_flow_or_a_route_flow():
    """Flows 1-3 cross every link, but leave the route s2' holds toward down2' untested (the last
    switch, t2', is the host's own leaf: its route is the link's); flow 4 is the one candidate that
    tests it: it is added, and nothing else."""
    paths = {("x", "y", 1): hops("up", "s1", "t", "down"), ("x", "y", 2): hops("up", "s2", "t", "down"),
             ("x", "z", 3): hops("up", "s1", "t2", "down2"), ("x", "z", 4): hops("up", "s2", "t2", "down2")}
    links_once = [("x", "y", 1), ("x", "y", 2), ("x", "z", 3)]
    assert _routes(paths, links_once) == [("x", "z", 4)]
    assert _routes(paths, list(paths)) == []
    chosen = select(paths, 1)
    tested = set().union(*(routes_of(paths[flow]) for flow in chosen.flows + chosen.routes))
    assert tested == set().union(*(routes_of(path) for path in paths.values()))


def test_pairs_for_routes_only_leave_the_links_selection_as_it_was():
    """A pair planned for a route alone is weighed for routes, never for links: with it the links'
    flows are those selected without it, and it is probed for the route it alone tests."""
    links = {("x", "y", 1): hops("up", "s1", "t", "down"), ("x", "y", 2): hops("up", "s2", "t", "down"),
             ("x", "z", 3): hops("up", "s1", "t2", "down2")}
    routes = {("w", "z", 4): hops("up3", "s2", "t2", "down2")}  # also the only path over up3 and s2 -> t2
    alone = select(links, 1)
    both = select({**links, **routes}, 1, routes_only=frozenset({("w", "z")}))
    assert both.flows == alone.flows and both.routes == [("w", "z", 4)]
    assert ("w", "z", 4) in select({**links, **routes}, 1).flows  # let in, it would cover links
