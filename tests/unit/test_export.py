"""containerlab export: every shipped lab gives a topology that keeps containerlab's rules (its own
JSON schema, and the cross-references a schema cannot state) and describes the same graph as the
model, on one machine or split over several with VXLAN between them."""

import json
from collections import Counter
from pathlib import Path

import jsonschema
import networkx as nx
import pytest
from ruamel.yaml import YAML
from test_model import fabric_of

from twin.model.export import VXLAN_PORT, problems, topology, write, write_split
from twin.model.fabric import IFNAMSIZ
from twin.model.host_routing import host_routing, ip_commands
from twin.model.partition import split

LABS = ["mini", "rail4", "rail8", "pod64", "pod128"]
# Written and read back whole: pod128's 10 MB file takes 15 s to dump and parse; its rules are
# checked above, and its split below writes and validates every node and link of it.
WRITTEN = LABS[:-1]
SCHEMA = Path(__file__).resolve().parents[3] / "shared" / "containerlab" / "clab.schema.json"


@pytest.fixture(scope="module")
def clab_schema():
    if not SCHEMA.is_file():
        pytest.skip(f"containerlab's schema is not on this machine ({SCHEMA}): the shared reference folder is absent")
    # The schema's patterns are ECMAScript (Go's regexp reads them the same way): the class
    # [\p{N}\p{L}] (an IPv6 zone's letters and digits) has no spelling in Python's re, which reads
    # it as [^\W_] (letters and digits), the one translation made here.
    text = SCHEMA.read_text().replace("[\\\\p{N}\\\\p{L}]", "[^\\\\W_]")
    schema = json.loads(text)
    return jsonschema.Draft7Validator(schema)


def schema_errors(validator, document) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(document)]


@pytest.mark.parametrize("lab", LABS)
def test_export_keeps_containerlabs_rules(lab):
    assert problems(topology(fabric_of(lab))) == []


@pytest.mark.parametrize("lab", WRITTEN)
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
            "zebra.conf", "bfdd.conf", "bgpd.conf"}


def test_every_exported_port_gets_the_twins_queue_tree():
    """The export's shaping commands are the tree bring-up makes (model/queue_tree.py), the control
    plane's four filters included (the export once made the data queue only: a paused or slow data
    class there held BGP and BFD too). tests/integration/test_mini.py has the kernel compare them."""
    fabric = fabric_of("mini")
    node = "leaf-g1-r1"
    commands = topology(fabric)["topology"]["nodes"][node]["stages"]["create-links"]["exec"]
    ports = [link.endpoint(node).ifname for link in fabric.links_of(node)]
    for port in ports:
        mine = [c["command"] for c in commands if f" dev {port} " in c["command"]]
        assert len(mine) == 7, mine
        assert all(c.startswith(f"ip netns exec clab-mini-{node} tc ") for c in mine)
        assert sum(c.endswith(" flowid 1:") for c in mine) == 4  # a switch's control: the root's direct queue
        assert any(" match u16 0xb3 0xffff at 22 " in c for c in mine)  # BGP toward the port's peer
    assert len(commands) == 7 * len(ports)


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


@pytest.mark.parametrize("lab", WRITTEN)
def test_export_is_valid_against_containerlabs_schema(lab, clab_schema, tmp_path):
    path = write(fabric_of(lab), tmp_path)
    document = YAML(typ="safe").load(path.read_text())
    assert schema_errors(clab_schema, document) == []


def test_the_schema_check_can_fail(clab_schema):
    document = topology(fabric_of("mini"))
    document["topology"]["links"][0]["mtu"] = "jumbo"
    document["topology"]["nodes"]["leaf-g1-r1"]["kind"] = 7
    assert len(schema_errors(clab_schema, document)) >= 2


@pytest.mark.parametrize("lab, machines", [("mini", 2), ("rail4", 3), ("pod128", 4)])
def test_split_export_is_schema_valid_and_stitches_every_link_once(lab, machines, clab_schema, tmp_path):
    """Each machine's file validates; every node runs on exactly one machine; a link inside a machine
    is a veth there, a link between two is a vxlan-stitch at both ends with one VNI and each end
    pointing at the other's machine."""
    fabric = fabric_of(lab)
    addresses = [f"10.9.0.{m + 1}" for m in range(machines)]
    paths = write_split(fabric, tmp_path, machines, addresses)
    documents = [YAML(typ="safe").load(p.read_text()) for p in paths]
    placed = Counter()
    veths, stitched = set(), {}
    for machine, document in enumerate(documents):
        assert schema_errors(clab_schema, document) == [] and problems(document) == []
        placed.update(list(document["topology"]["nodes"]))
        for link in document["topology"]["links"]:
            if link.get("type") == "vxlan-stitch":
                end = link["endpoint"]
                stitched.setdefault(link["vni"], []).append((machine, end["node"], end["interface"], link["remote"]))
                assert link["dst-port"] == VXLAN_PORT and link["mtu"] == fabric.mtu
            else:
                veths.add(frozenset(e.split(":")[0] for e in link["endpoints"]))
    assert set(placed) == set(fabric.nodes) and set(placed.values()) == {1}
    assert len(stitched) + len(veths) == len(fabric.links)
    for _vni, ends in stitched.items():
        (m1, a, a_if, remote1), (m2, b, b_if, remote2) = ends
        assert m1 != m2 and remote1 == addresses[m2] and remote2 == addresses[m1]
        link = fabric.find_link(a, b)
        assert {(link.a.node, link.a.ifname), (link.b.node, link.b.ifname)} == {(a, a_if), (b, b_if)}
    for machine, path in enumerate(paths):  # each machine has the FRR configs of its switches only
        mine = {n for n, m in split(fabric, machines).items() if m == machine and fabric.nodes[n].is_switch}
        assert {p.name for p in path.parent.iterdir() if p.is_dir()} == mine


def test_every_exported_host_gets_the_twins_routing():
    """A host's exec commands carry its per-NIC rules and routes from the plan bring-up makes
    (model/host_routing.py); tests/integration/test_mini.py has the kernel compare them."""
    fabric = fabric_of("rail4")
    host = fabric.nodes["host-g1-h1"]
    commands = topology(fabric)["topology"]["nodes"][host.name]["exec"]
    routing = [c for c in commands if c.startswith(("ip route", "ip rule"))]
    rails = len(fabric.links_of(host.name))
    assert routing == ip_commands(host_routing(fabric, host)) and len(routing) == 4 * rails + 1
    assert sum("uidrange" in c for c in routing) == rails and all("congctl cubic" in c for c in routing if "route" in c)
