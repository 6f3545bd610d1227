"""containerlab export: every shipped lab gives a topology that keeps containerlab's rules and
describes the same graph as the model."""

import networkx as nx
import pytest
from ruamel.yaml import YAML
from test_model import fabric_of

from twin.lab.export import problems, topology, write
from twin.model.fabric import IFNAMSIZ

LABS = ["mini", "rail4", "rail8"]


@pytest.mark.parametrize("lab", LABS)
def test_export_keeps_containerlabs_rules(lab):
    assert problems(topology(fabric_of(lab))) == []


@pytest.mark.parametrize("lab", LABS)
def test_export_parses_back_to_the_models_graph(lab, tmp_path):
    fabric = fabric_of(lab)
    path = write(fabric, tmp_path)
    document = YAML(typ="safe").load(path.read_text())
    graph = nx.Graph()
    graph.add_nodes_from(document["topology"]["nodes"])
    for link in document["topology"]["links"]:
        (a, a_if), (b, b_if) = (e.split(":") for e in link["endpoints"])
        graph.add_edge(a, b)
        model = fabric.find_link(a, b)
        assert {(model.a.node, model.a.ifname), (model.b.node, model.b.ifname)} == {(a, a_if), (b, b_if)}
        assert link["mtu"] == fabric.mtu and link["vars"]["rate_bps"] == fabric.rate_bps
    assert set(graph.nodes) == set(fabric.graph.nodes)
    assert {frozenset(e) for e in graph.edges} == {frozenset(e) for e in fabric.graph.edges}
    for switch in fabric.switches:  # the configs the binds point at
        assert {p.name for p in (tmp_path / switch.name).iterdir()} == {
            "zebra.conf", "bfdd.conf", "bgpd.conf", "staticd.conf"}


def test_rule_violations_are_reported():
    document = {"name": "bad name", "topology": {"nodes": {"a": {"kind": "linux", "image": "x"},
                                                            "-b": {"kind": "linux"}},
                                                  "links": [{"endpoints": ["a:eth1", "c:eth1"]},
                                                            {"endpoints": ["a:eth1", "a:" + "x" * (IFNAMSIZ + 1)]},
                                                            {"endpoints": ["a-eth2"]}]}}
    found = problems(document)
    assert len(found) == 7, found
    assert any("'bad name'" in p for p in found) and any("'-b'" in p for p in found)
    assert any("needs kind and image" in p for p in found) and any("'c' is not defined" in p for p in found)
    assert any("used by another link" in p for p in found) and any("longer than 15" in p for p in found)
    assert any("a list of two" in p for p in found)
