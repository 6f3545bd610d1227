"""What probe-likelihood weighs for a path (detect/hypotheses.py): its hops in the direction
crossed, the routes at its switches toward the destination, the switches; and what each names."""

from twin.detect.hypotheses import Hypotheses, is_hop, is_route, is_unknown, on_link, precedence

SWITCHES = {"leaf-g1-r1", "spine-r1-s1", "superspine-1", "spine-r2-s2", "leaf-g2-r2"}
SRC, DST = "host-g1-h1:nic1", "host-g2-h1:nic2"
LINKS = ("leaf-g1-r1 -- host-g1-h1", "spine-r1-s1 -- leaf-g1-r1", "superspine-1 -- spine-r1-s1",
         "superspine-1 -- spine-r2-s2", "spine-r2-s2 -- leaf-g2-r2", "leaf-g2-r2 -- host-g2-h1")
HOPS = ("host-g1-h1 -- leaf-g1-r1>leaf-g1-r1", "leaf-g1-r1 -- spine-r1-s1>spine-r1-s1",
        "spine-r1-s1 -- superspine-1>superspine-1", "spine-r2-s2 -- superspine-1>spine-r2-s2",
        "leaf-g2-r2 -- spine-r2-s2>leaf-g2-r2", "host-g2-h1 -- leaf-g2-r2>host-g2-h1")


def test_a_path_is_its_hops_in_the_direction_crossed_its_links_routes_and_switches():
    found = Hypotheses(SWITCHES).of_path(SRC, LINKS, DST)
    assert tuple(h for h in found if is_hop(h)) == HOPS
    named = {h for h in found if on_link(h) and not is_hop(h)}
    assert named == {" -- ".join(sorted(link.split(" -- "))) for link in LINKS}
    routes = {h for h in found if is_route(h)}
    # toward the NIC: not at its own leaf (there it is the hop leaf>host); toward the host: everywhere
    assert routes == {f"{s}@{DST}" for s in SWITCHES - {"leaf-g2-r2"}} | {f"{s}@host-g2-h1" for s in SWITCHES}
    assert {h for h in found if not on_link(h) and not is_route(h)} == SWITCHES


def test_each_hypothesis_names_a_link_or_a_switch_and_belongs_to_its_switches():
    hypotheses = Hypotheses(SWITCHES)
    hypotheses.of_path(SRC, LINKS, DST)
    assert hypotheses.name[HOPS[2]] == "spine-r1-s1 -- superspine-1"
    assert hypotheses.name["superspine-1@host-g2-h1"] == "superspine-1"
    assert hypotheses.nodes[HOPS[0]] == {"leaf-g1-r1"}  # a host is no switch
    assert {HOPS[1], HOPS[2], "spine-r1-s1", f"spine-r1-s1@{DST}"} <= hypotheses.of_switch["spine-r1-s1"]
    assert sorted([f"spine-r1-s1@{DST}", "spine-r1-s1", HOPS[1]], key=precedence) == \
        [HOPS[1], "spine-r1-s1", f"spine-r1-s1@{DST}"]


def test_a_hop_after_one_that_did_not_answer_is_oriented_by_the_next_known_link():
    gap = (LINKS[0], LINKS[1], None, LINKS[3], LINKS[4], LINKS[5])
    found = Hypotheses(SWITCHES).of_path(SRC, gap, DST)
    assert tuple(h for h in found if is_hop(h)) == HOPS[:2] + HOPS[3:]
    # what did not answer is a cause of its own, between the nodes known around it
    assert [h for h in found if is_unknown(h)] == ["?spine-r1-s1|superspine-1"]
    # two silent hops in a row: the link between them cannot be oriented, and is left out
    two = (LINKS[0], None, LINKS[2], None, LINKS[4], LINKS[5])
    hops = tuple(h for h in Hypotheses(SWITCHES).of_path(SRC, two, DST) if is_hop(h))
    assert hops == (HOPS[0], HOPS[4], HOPS[5])
