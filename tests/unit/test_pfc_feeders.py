"""PFC pauses (congestion and storms) follow valley-free (up-down) routing, which cannot deadlock."""

from twin.lab.files import open_lab
from twin.model.ports import TIER, feeders


def test_feeders_of_a_downward_port_are_all_other_neighbours():
    _lab, fabric = open_lab("rail4")
    assert sorted(feeders(fabric, "leaf-g1-r1", "hs-g1h1")) == [
        ("host-g1-h2", "nic1"), ("spine-r1-s1", "lf-g1r1"), ("spine-r1-s2", "lf-g1r1")]


def test_feeders_of_an_upward_port_are_below_only():
    _lab, fabric = open_lab("rail4")
    for node in fabric.switches:
        for link in fabric.links_of(node.name):
            out = link.peer(node.name).node
            for peer, _ifname in feeders(fabric, node.name, link.endpoint(node.name).ifname):
                assert peer != out
                if TIER[fabric.nodes[out].role] > TIER[node.role]:  # going up: never fed from above
                    assert TIER[fabric.nodes[peer].role] < TIER[node.role], (node.name, out, peer)
