"""config-audit's comparisons without a lab: the rendered intent passes, each drift is named once."""

from test_model import fabric_of

from twin.detect.config_audit import ConfigAudit, Finding, bgp_findings
from twin.model.fabric import link_key
from twin.model.render import bgp_neighbors, render_switch


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
