"""Leaves that announce their hosts summarized (`routing.host_routes: leaf`) on a real lab: the
spines route each leaf's summary and no host's /31; a host link that goes down changes no route
beyond its leaf; a bad route map for one host at its leaf cuts off the leaf's every host, as a bad
entry for a ToR's subnet does, and clearing it restores the routes."""

import time
from ipaddress import IPv4Network

import pytest

from twin.faults import engine
from twin.faults.base import FaultContext
from twin.lab.reach import unreachable_pairs
from twin.lab.routing.converge import kernel_next_hops
from twin.model.build import rail_network
from twin.model.ecmp import leaf_summaries

from .helpers import lab_copy, lab_running, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.own_labs, pytest.mark.xdist_group("host-routes")]
RAIL = rail_network(1)  # mini's one rail: its host links' addresses


@pytest.fixture(scope="module")
def summarized(tmp_path_factory):
    path = lab_copy(tmp_path_factory.mktemp("host-routes"), "mini", "summaries")
    text = path.read_text().replace("  ecmp_hash: l4\n", "  ecmp_hash: l4\n  host_routes: leaf\n")
    assert "host_routes: leaf" in text
    path.write_text(text)
    with lab_running(str(path), "netns") as lab:
        yield lab


def host_routes(lab, switch) -> dict[IPv4Network, int]:
    """The switch's kernel routes into the rails' host space, and their next hops, its own
    connected /31s and summaries left out."""
    own = {link.network for link in lab.fabric.links_of(switch) if link.kind == "host"}
    own |= set(leaf_summaries(lab.fabric).get(switch, []))
    return {prefix: hops for prefix, hops in kernel_next_hops(lab, switch).items()
            if prefix.subnet_of(RAIL) and prefix not in own}


def inject(lab, entry: dict) -> None:
    engine.inject(FaultContext(lab), *engine.parse(entry))


def test_the_spines_route_each_leafs_summary_and_no_hosts_own_prefix(summarized):
    summaries = leaf_summaries(summarized.fabric)
    assert summaries == {"leaf-g1-r1": [IPv4Network("10.1.0.0/30")], "leaf-g2-r1": [IPv4Network("10.1.0.4/30")]}
    for spine in ("spine-1", "spine-2"):
        assert host_routes(summarized, spine) == {IPv4Network("10.1.0.0/30"): 1, IPv4Network("10.1.0.4/30"): 1}
    assert host_routes(summarized, "leaf-g2-r1") == {IPv4Network("10.1.0.0/30"): 2}
    assert unreachable_pairs(summarized) == []


def test_a_host_link_down_moves_no_route_beyond_its_leaf(summarized):
    before = {spine: host_routes(summarized, spine) for spine in ("spine-1", "spine-2", "leaf-g2-r1")}
    inject(summarized, {"id": "cut", "kind": "link_down", "link": "leaf-g1-r1 -- host-g1-h1"})
    try:
        time.sleep(1.0)  # a per-link lab's spines lose the host's /31 well within this (BGP's withdrawal)
        assert {spine: host_routes(summarized, spine) for spine in before} == before
        unreachable = unreachable_pairs(summarized)
        assert unreachable and all("host-g1-h1:nic1" in pair for pair in unreachable)
    finally:
        engine.clear(FaultContext(summarized), "cut")
    wait_for(lambda: unreachable_pairs(summarized) == [], what="the host to be reachable again")


def test_a_route_map_for_one_host_at_its_leaf_cuts_off_the_leafs_summary(summarized):
    summary = IPv4Network("10.1.0.0/30")
    inject(summarized, {"id": "bad-map", "kind": "route_filter", "node": "leaf-g1-r1", "host": "host-g1-h1"})
    try:
        wait_for(lambda: summary not in host_routes(summarized, "leaf-g2-r1"),
                 what="the other leaf to lose the summary")
        unreachable = set(unreachable_pairs(summarized))
        assert ("host-g2-h1:nic1", "host-g1-h2:nic1") in unreachable  # the host beside the one named
    finally:
        engine.clear(FaultContext(summarized), "bad-map")
    wait_for(lambda: host_routes(summarized, "leaf-g2-r1").get(summary) == 2, what="the summary to come back")
    wait_for(lambda: unreachable_pairs(summarized) == [], what="every pair to be reachable again")
