"""`twin export LAB --format containerlab`: the lab as a containerlab topology, for twins larger
than one machine (containerlab's multi-host mode, or Kubernetes with clabernetes).

Every node is of kind `linux`, with the switch or the host image (images/). A switch gets its
rendered FRR configs bound read-only and starts its daemons from `exec`; every node configures
its addresses, sysctls and (hosts) per-NIC routing with `exec` commands generated from the same
model as the netns runtime. Links carry the MTU and, in `vars`, the line rate; a host-side
`create-links` stage command per node makes each port's queue tree, the one a twin's port has
(model/queue_tree.py), there (containerlab creates a network namespace link named after each
container).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ruamel.yaml import YAML

from twin import __version__
from twin.model import queue_tree
from twin.model.buffers import port_shaping
from twin.model.daemons import FrrDaemon, start_groups
from twin.model.fabric import IFNAMSIZ, Fabric, Node
from twin.model.host_routing import host_routing, ip_commands
from twin.model.partition import VXLAN_PORT, SeamEnd, seam, split
from twin.model.ports import Port
from twin.model.render import render_bfd_binding, render_switch
from twin.model.sysctls import node_sysctls

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")  # container names (containerlab's node names)
SWITCH_IMAGE = f"fabric-twin-switch:{__version__}"
HOST_IMAGE = f"fabric-twin-host:{__version__}"
FRR_DIR_IN_CONTAINER = "/etc/fabric-twin/lab/frr"


DOC_ADDRESSES = "192.0.2."  # TEST-NET-1: placeholders until the machines' addresses are given


def topology(fabric: Fabric, where: dict[str, int] | None = None, machine: int = 0,
             addresses: list[str] | None = None) -> dict:
    """The containerlab topology document for the lab, or for one machine of a split (`where`:
    node -> machine): its nodes, its links as veths, and each link to another machine as a
    `vxlan-stitch` to that machine's address, with one VNI per link, the same at both ends (the
    wiring a share of `twin lab up --machines` makes: partition.seam)."""
    where = where or dict.fromkeys(fabric.nodes, machine)
    mine = [n for n in fabric.nodes.values() if where[n.name] == machine]
    nodes = {node.name: _node(fabric, node) for node in mine}
    links = [{"endpoints": [f"{link.a.node}:{link.a.ifname}", f"{link.b.node}:{link.b.ifname}"],
              "mtu": fabric.mtu, "vars": {"rate_bps": fabric.rate_bps, "kind": link.kind}}
             for link in fabric.links if where[link.a.node] == where[link.b.node] == machine]
    links += [_vxlan(end, addresses or [], fabric) for end in seam(fabric, where, machine)]
    return {"name": fabric.name, "topology": {"nodes": nodes, "links": links}}


def _vxlan(end: SeamEnd, addresses: list[str], fabric: Fabric) -> dict:
    remote = end.remote_machine
    return {"type": "vxlan-stitch", "endpoint": {"node": end.end.node, "interface": end.end.ifname},
            "remote": addresses[remote] if remote < len(addresses) else f"{DOC_ADDRESSES}{remote + 1}",
            "vni": end.vni, "dst-port": VXLAN_PORT, "mtu": fabric.mtu,
            "vars": {"rate_bps": fabric.rate_bps, "kind": end.link.kind}}


def _node(fabric: Fabric, node: Node) -> dict:
    commands = [f"sysctl -qw {key}={value}" for key, value in node_sysctls(fabric, node).items()]
    if node.loopback is not None:
        commands.append(f"ip addr add {node.loopback}/32 dev lo")
    for link in fabric.links_of(node.name):
        end, peer = link.endpoint(node.name), link.peer_address(node.name)
        commands.append(f"ip addr add {end.address}{f' peer {peer}/32' if peer else ''} dev {end.ifname}")
    entry = {"kind": "linux", "image": SWITCH_IMAGE if node.is_switch else HOST_IMAGE,
             "labels": {"fabric-twin.lab": fabric.name, "fabric-twin.role": node.role}}
    if node.is_switch:
        entry["binds"] = [f"{node.name}:{FRR_DIR_IN_CONTAINER}:ro"]
        commands += [_daemon(d) for group in start_groups() for d in group]  # zebra first
        # BFD on every session, as `up` binds it (vtysh waits for bgpd to answer)
        commands.append("vtysh " + " ".join(f"-c {shlex.quote(line)}" for line in render_bfd_binding(node)))
    else:
        commands += ip_commands(host_routing(fabric, node))
    entry["exec"] = commands
    entry["stages"] = {"create-links": {"exec": [
        {"command": command, "target": "host", "phase": "on-exit"} for command in _shaping(fabric, node)]}}
    return entry


def _daemon(daemon: FrrDaemon) -> str:
    extra = f" --bfdctl /var/run/frr/{daemon.control_socket}" if daemon.control_socket else ""
    return f"/usr/lib/frr/{daemon.name} -d -u frr -g frr -f {FRR_DIR_IN_CONTAINER}/{daemon.config}{extra}"


def _shaping(fabric: Fabric, node: Node) -> list[str]:
    """Each of the node's ports gets the twin's queue tree (model/queue_tree.py: HTB at the line rate,
    the data queue sized as the twin sizes it, the control plane's filters and a NIC's control class), made on the host
    in the node's namespace. (The PFC controller does not run there: an exported lab's queues drop
    when full, as with `pfc: false`.)"""
    netns = f"clab-{fabric.name}-{node.name}"
    commands = []
    for link in fabric.links_of(node.name):
        dev = link.endpoint(node.name).ifname
        tree = queue_tree.port_tree(*port_shaping(fabric, Port(node.name, dev)))
        commands += [shlex.join(["ip", "netns", "exec", netns, "tc", *args])
                     for args in queue_tree.tc_commands(tree, dev)]
    return commands


def problems(document: dict) -> list[str]:
    """containerlab's topology rules, checked on a document: required keys, node and interface
    names, endpoint syntax, every endpoint's node defined, no interface used twice."""
    found = []
    if not isinstance(document.get("name"), str) or not NAME_PATTERN.match(document["name"]):
        found.append(f"lab name {document.get('name')!r} does not match {NAME_PATTERN.pattern}")
    topo = document.get("topology") or {}
    nodes, links = topo.get("nodes") or {}, topo.get("links") or []
    if not nodes:
        found.append("topology.nodes is empty")
    for name, node in nodes.items():
        if not NAME_PATTERN.match(name):
            found.append(f"node name {name!r} does not match {NAME_PATTERN.pattern}")
        if not node.get("kind") or not node.get("image"):
            found.append(f"node {name} needs kind and image")
    used = set()
    for number, link in enumerate(links):
        if link.get("type") in ("vxlan", "vxlan-stitch"):  # one end here, the other on another machine
            end = link.get("endpoint") or {}
            endpoints = [f"{end.get('node')}:{end.get('interface') or ''}"]
        else:
            endpoints = link.get("endpoints")
            if not isinstance(endpoints, list) or len(endpoints) != 2:
                endpoints = None
        if endpoints is None:
            found.append(f"link {number}: endpoints must be a list of two 'node:interface'")
            continue
        for endpoint in endpoints:
            node, _, ifname = str(endpoint).partition(":")
            if not ifname:
                found.append(f"link {number}: {endpoint!r} is not 'node:interface'")
            elif node not in nodes:
                found.append(f"link {number}: node {node!r} is not defined")
            elif len(ifname) > IFNAMSIZ:
                found.append(f"link {number}: interface {ifname!r} is longer than {IFNAMSIZ} characters")
            elif (node, ifname) in used:
                found.append(f"link {number}: {endpoint} is used by another link")
            used.add((node, ifname))
    return found


def write(fabric: Fabric, out: Path, document: dict | None = None) -> Path:
    """The topology file and one folder of FRR configs per switch it runs, under `out`."""
    document = document or topology(fabric)
    out.mkdir(parents=True, exist_ok=True)
    for node in fabric.switches:
        if node.name not in document["topology"]["nodes"]:
            continue
        folder = out / node.name
        folder.mkdir(exist_ok=True)
        for daemon, text in render_switch(fabric, node).items():
            (folder / f"{daemon}.conf").write_text(text)
    path = out / f"{fabric.name}.clab.yml"
    # The safe dumper with libyaml's emitter: the round-trip one, pure Python, took 28 s for pod128's
    # 10 MB; in the model's order, as the round-trip one wrote it.
    yaml = YAML(typ="safe", pure=False)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False
    with path.open("w") as handle:
        handle.write(f"# fabric-twin {__version__}: `twin export {fabric.name} --format containerlab`\n")
        yaml.dump(document, handle)
    return path


def write_split(fabric: Fabric, out: Path, machines: int, addresses: list[str]) -> list[Path]:
    """One folder per machine (machine-1 ...), each a topology of its own for `containerlab deploy`."""
    where = split(fabric, machines)
    return [write(fabric, out / f"machine-{m + 1}", topology(fabric, where, m, addresses)) for m in range(machines)]
