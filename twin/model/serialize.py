"""The built model as JSON: saved when a lab comes up (model.json in the lab directory) and in
every results folder, so a running lab or a past run is read back exactly as it was built,
without the lab file (which may have changed or moved since)."""

from __future__ import annotations

import dataclasses
import json
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

from twin.model.build import make_graph
from twin.model.fabric import Endpoint, Fabric, Link, Node

FORMAT = 1
_STRUCTURE = ("nodes", "links", "graph")


def to_dict(fabric: Fabric) -> dict:
    scalars = {f.name: getattr(fabric, f.name) for f in dataclasses.fields(fabric) if f.name not in _STRUCTURE}
    return {
        "format": FORMAT, **scalars,
        "nodes": [{**dataclasses.asdict(n), "loopback": str(n.loopback) if n.loopback else None}
                  for n in fabric.nodes.values()],
        "links": [{"a": _end(link.a), "b": _end(link.b), "kind": link.kind,
                   "rail": link.rail} for link in fabric.links],
    }


def _end(end: Endpoint) -> dict:
    return {"node": end.node, "ifname": end.ifname, "address": str(end.address) if end.address else None}


def from_dict(data: dict) -> Fabric:
    if data.get("format") != FORMAT:
        raise ValueError(f"model format {data.get('format')!r}, this version reads {FORMAT}")
    scalars = {k: v for k, v in data.items() if k not in (*_STRUCTURE, "format")}
    fabric = Fabric(**scalars)
    for raw in data["nodes"]:
        node = Node(**{**raw, "loopback": IPv4Address(raw["loopback"]) if raw["loopback"] else None})
        fabric.nodes[node.name] = node
    for raw in data["links"]:
        fabric.links.append(Link(_endpoint(raw["a"]), _endpoint(raw["b"]), raw["kind"], raw["rail"]))
    make_graph(fabric, None)
    return fabric.freeze()


def _endpoint(raw: dict) -> Endpoint:
    return Endpoint(raw["node"], raw["ifname"], IPv4Interface(raw["address"]) if raw["address"] else None)


def save(fabric: Fabric, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_dict(fabric)))
    tmp.replace(path)


def load(path: Path) -> Fabric:
    return from_dict(json.loads(path.read_text()))
