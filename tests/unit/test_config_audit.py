"""config-audit's comparisons without a lab: the rendered intent passes, each drift is named once."""

import pydantic
import pytest
from test_model import fabric_of

from twin.detect.config_audit import ConfigAudit, Finding, bgp_findings, cabling_findings
from twin.faults import engine
from twin.lab.routing.lldp import Neighbor
from twin.model.fabric import link_key
from twin.model.render import bgp_neighbors, render_switch
from twin.model.targets import TargetError


def running(fabric, node):
    """bgpd's config as the lab renders it, sessions open: what a healthy switch runs."""
    return render_switch(fabric, fabric.nodes[node])["bgpd"].splitlines()


def test_the_rendered_intent_has_no_finding_on_any_switch():
    for lab in ("mini", "rail4"):
        fabric = fabric_of(lab)
        for node in fabric.switches:
            assert bgp_findings(fabric, node.name, running(fabric, node.name)) == [], node.name


def test_each_drift_is_found_on_its_link_or_switch():
    fabric = fabric_of("mini")
    config = running(fabric, "leaf-g1-r1")
    spine = bgp_neighbors(fabric, fabric.nodes["leaf-g1-r1"])[0]
    drifted = [line.replace(f"remote-as {spine['asn']}", f"remote-as {spine['asn'] + 99}")
               if line.startswith(f" neighbor {spine['address']} remote-as")
               else line.replace("maximum-paths 2", "maximum-paths 1") for line in config]
    drifted.insert(drifted.index(" address-family ipv4 unicast") + 1, "  neighbor FABRIC route-map BAD out")
    drifted.append(f" neighbor {spine['address']} shutdown")
    found = {(f.kind, f.link or f.node) for f in bgp_findings(fabric, "leaf-g1-r1", drifted)}
    peer = link_key(f"leaf-g1-r1 -- {spine['name']}")
    assert found == {("peer_mismatch", peer), ("bgp_down", peer), ("ecmp_width", "leaf-g1-r1"),
                     ("route_filter", "leaf-g1-r1")}


def test_a_finding_is_named_once_and_again_when_it_comes_back():
    audit = ConfigAudit()
    drift = Finding("hash_policy", node="spine-1", detail="0")
    assert [v.node for v in audit.observe(1.0, [drift])] == ["spine-1"]
    assert audit.observe(2.0, [drift]) == []
    assert audit.observe(3.0, []) == []
    assert [v.kind for v in audit.observe(4.0, [drift])] == ["hash_policy"]


def heard_as_wired(fabric):
    """What every switch port's LLDP hears on a lab cabled as its model says."""
    heard = {}
    for link in fabric.links:
        for end, far in ((link.a, link.b), (link.b, link.a)):
            if fabric.nodes[end.node].is_switch:
                heard.setdefault(end.node, {})[end.ifname] = Neighbor(far.node, far.ifname)
    return heard


def test_a_lab_cabled_as_its_model_has_no_cabling_finding_and_silence_is_none():
    fabric = fabric_of("rail4")
    heard = heard_as_wired(fabric)
    assert cabling_findings(fabric, heard) == []
    del heard["leaf-g1-r1"]  # not heard yet, or its lldpd is down: not a miswire
    heard["leaf-g1-r2"].clear()
    assert cabling_findings(fabric, heard) == []


def test_a_hosts_swapped_nic_cables_name_the_host_and_a_leafs_swapped_uplinks_the_leaf():
    fabric = fabric_of("rail4")
    leaf1, leaf2 = (fabric.find_link(leaf, "host-g1-h1").endpoint(leaf).ifname for leaf in ("leaf-g1-r1", "leaf-g1-r2"))
    heard = heard_as_wired(fabric)
    heard["leaf-g1-r1"][leaf1] = Neighbor("host-g1-h1", "nic2")
    heard["leaf-g1-r2"][leaf2] = Neighbor("host-g1-h1", "nic1")
    assert [(f.kind, f.node) for f in cabling_findings(fabric, heard)] == [("miswire", "host-g1-h1")]

    heard = heard_as_wired(fabric)  # the leaf's cables to its two spines swapped at the spines
    up1, up2 = (fabric.find_link("leaf-g1-r1", spine) for spine in ("spine-r1-s1", "spine-r1-s2"))
    heard["spine-r1-s1"][up1.endpoint("spine-r1-s1").ifname] = Neighbor("leaf-g1-r1", up2.endpoint("leaf-g1-r1").ifname)
    heard["spine-r1-s2"][up2.endpoint("spine-r1-s2").ifname] = Neighbor("leaf-g1-r1", up1.endpoint("leaf-g1-r1").ifname)
    heard["leaf-g1-r1"][up1.endpoint("leaf-g1-r1").ifname] = Neighbor("spine-r1-s2", up2.endpoint("spine-r1-s2").ifname)
    heard["leaf-g1-r1"][up2.endpoint("leaf-g1-r1").ifname] = Neighbor("spine-r1-s1", up1.endpoint("spine-r1-s1").ifname)
    assert [(f.kind, f.node) for f in cabling_findings(fabric, heard)] == [("miswire", "leaf-g1-r1")]


def test_miswire_names_two_ports_of_the_node_it_swaps():
    fabric = fabric_of("rail4")
    for entry, targets in (({"node": "host-g1-h1", "nics": ["nic1", "nic2"]}, ["host-g1-h1"]),
                           ({"node": "leaf-g1-r1", "ports": ["sp-r1s1", "sp-r1s2"]}, ["leaf-g1-r1"])):
        timing, params = engine.parse({"id": "x", "kind": "miswire", **entry})
        assert engine.targets(timing, params, fabric) == targets
    for wrong in ({"node": "leaf-g1-r1", "nics": ["sp-r1s1", "sp-r1s2"]},  # a switch has ports
                  {"node": "host-g1-h1", "nics": ["nic1", "nic9"]}):
        timing, params = engine.parse({"id": "x", "kind": "miswire", **wrong})
        with pytest.raises(TargetError):
            engine.targets(timing, params, fabric)
    for wrong in ({"node": "host-g1-h1", "nics": ["nic1", "nic1"]}, {"node": "host-g1-h1"},
                  {"node": "host-g1-h1", "nics": ["nic1", "nic2"], "ports": ["a", "b"]}):
        with pytest.raises((pydantic.ValidationError, engine.FaultSpecError)):
            engine.parse({"id": "x", "kind": "miswire", **wrong})
