"""The typed fabric model. Pure description: no kernel handles, no pids.

Built in steps (model/build.py), then frozen: every later reader (a fault, a workload, the
dashboard) sees the same model, and a change to it raises instead of drifting silently. A
different runtime is a copy (`Fabric.with_runtime`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from types import MappingProxyType
from typing import Literal

import networkx as nx

Role = Literal["host", "leaf", "spine", "superspine"]
SWITCH_ROLES = ("leaf", "spine", "superspine")
IFNAMSIZ = 15  # usable characters in a Linux interface name


class FrozenModelError(AttributeError):
    pass


class _Freezable:
    """After freeze(), setting an attribute raises (dataclasses' own frozen=True would forbid the
    build steps too)."""

    _frozen = False

    def __setattr__(self, key, value):
        if self._frozen:
            raise FrozenModelError(f"the fabric model is frozen after build: cannot set "
                                   f"{type(self).__name__}.{key}")
        super().__setattr__(key, value)

    def _freeze(self) -> None:
        object.__setattr__(self, "_frozen", True)


def link_key(name: str) -> str:
    """A link's canonical name: 'b -- a' and 'a -- b' name the same link."""
    ends = [part.strip() for part in name.split("--")]
    return " -- ".join(sorted(ends))


@dataclass
class Node(_Freezable):
    name: str
    role: Role
    group: int | None = None  # hosts and leaves
    rail: int | None = None  # leaves, and spines of a rail plane (3-tier)
    index: int = 0  # host number in its group, spine number in its plane, superspine number
    side: str = ""  # leaves of a dual-port NIC fabric, spines of a dual-plane one: "a" or "b"
    asn: int | None = None  # switches only
    loopback: IPv4Address | None = None  # switches only

    @property
    def is_switch(self) -> bool:
        return self.role in SWITCH_ROLES


@dataclass
class Endpoint(_Freezable):
    node: str
    ifname: str = ""
    address: IPv4Interface | None = None


@dataclass
class Link(_Freezable):
    a: Endpoint  # the upper tier end for fabric links, the leaf for host links
    b: Endpoint
    kind: Literal["host", "fabric"]
    rail: int | None = None  # host links: the NIC's rail

    @property
    def name(self) -> str:
        return f"{self.a.node} -- {self.b.node}"

    @property
    def network(self) -> IPv4Network:
        """The shared /31 of a fabric link; the host's prefix of a host link: the /31 of a one-port
        NIC, the address of a dual-port one (its /32, the same on both of its links)."""
        end = self.b if self.kind == "host" else self.a
        assert end.address is not None
        return end.address.network

    def peer_address(self, node: str) -> IPv4Address | None:
        """The far end's address where the link is point to point (its ends hold /32s: a dual-port
        NIC's ports, model/build.py), which the near end's address names as its peer; else None."""
        end, far = self.endpoint(node), self.peer(node)
        if end.address is None or far.address is None or end.address.network.prefixlen != 32:
            return None
        return far.address.ip

    def endpoint(self, node: str) -> Endpoint:
        if node == self.a.node:
            return self.a
        if node == self.b.node:
            return self.b
        raise KeyError(node)

    def peer(self, node: str) -> Endpoint:
        return self.b if node == self.a.node else self.a


@dataclass
class Fabric(_Freezable):
    name: str
    tiers: int
    groups: int
    rails: int
    rate_bps: int
    mtu: int
    bfd_interval_ms: int
    bfd_multiplier: int
    ecmp_hash: Literal["l3", "l4"]
    runtime: str
    delay_s: float | None = None
    nic_ports: int = 1  # 2: every NIC has a port to each of two leaves of its rail (model/build.py)
    dual_plane: bool = False  # with 2 ports: the -a leaves on spines of their own, the -b on theirs
    pfc: bool = True  # lossless: PFC-like pauses instead of congestion drops (pfc/)
    buffer_bytes: int | None = None  # per switch port; None = derived (pfc/thresholds.py)
    pfc_xoff_bytes: int | None = None
    pfc_xon_bytes: int | None = None
    pfc_watchdog_ms: int | None = None
    # ECN marking at every switch queue (ebpf/queues.bpf.c); False in models saved before it existed
    ecn: bool = False
    ecn_kmin_bytes: int | None = None  # None = derived (model/buffers.py)
    ecn_kmax_bytes: int | None = None
    ecn_pmax: float | None = None
    # adaptive routing of reorderable packets at the switches' uplinks (ebpf/balance.h)
    load_balance: Literal["ecmp", "flowlet", "packet"] = "ecmp"
    flowlet_gap_s: float | None = None  # None = derived (model/balance.py)
    # "leaf": each leaf announces its host links summarized (model/ecmp.py, leaf_summaries); "link":
    # each host link's /31 alone
    host_routes: Literal["link", "leaf"] = "link"
    hash_offset: bool = False  # the switches' own ECMP hash, a flow's path moved by its offset (model/pathhash.py)
    # every node runs lldpd (lab/routing/lldp.py), so config-audit sees who is cabled to whom; False in
    # models saved before it existed
    lldp: bool = False
    # BFD's packets and timers in the lab's data plane process (lab/bfd/), bfdd the control plane;
    # netns labs only (a container's bfdd cannot reach it); False in models saved before it existed
    bfd_offload: bool = False
    # One machine's share of a lab split over machines (`twin lab up --machines N --machine K`,
    # model/partition.py): this machine runs the nodes the partition puts on machine K, and a link
    # to a node elsewhere is its local end only, a VXLAN tunnel to that machine's address.
    # machine 0: the whole lab runs here.
    machines: int = 1
    machine: int = 0  # 1-based
    machine_addresses: Sequence[str] = ()  # the underlay address of each machine, in order
    underlay: str | None = None  # the network namespace holding this machine's address; None: the root one
    split_of: str | None = None  # the whole lab's name (a share is named <lab>-m<K>)
    placement: Mapping[str, int] = field(default_factory=dict)  # node -> its 1-based machine (a share's)
    nodes: Mapping[str, Node] = field(default_factory=dict)  # a read-only view once frozen
    links: Sequence[Link] = field(default_factory=list)  # a tuple once frozen
    graph: nx.Graph = field(default_factory=nx.Graph)  # nx.freeze()d

    def freeze(self) -> Fabric:
        """End of build: from now on the model only reads."""
        for node in self.nodes.values():
            node._freeze()
        for link in self.links:
            link.a._freeze()
            link.b._freeze()
            link._freeze()
        object.__setattr__(self, "nodes", MappingProxyType(dict(self.nodes)))
        object.__setattr__(self, "links", tuple(self.links))
        by_node: dict[str, list[Link]] = {}
        for link in self.links:  # links_of in O(1): a 2,304-link lab asks it thousands of times
            by_node.setdefault(link.a.node, []).append(link)
            by_node.setdefault(link.b.node, []).append(link)
        object.__setattr__(self, "_by_node", {node: tuple(links) for node, links in by_node.items()})
        nx.freeze(self.graph)
        if self.machine:
            object.__setattr__(self, "_here", frozenset(n for n, m in self.placement.items() if m == self.machine))
        self._freeze()
        return self

    @property
    def frozen(self) -> bool:
        return self._frozen

    @property
    def queue_programs(self) -> bool:
        """Whether switch queues are measured in the kernel (PFC, ECN, adaptive routing by queue
        depth): the controller runs."""
        return self.pfc or self.ecn or self.load_balance != "ecmp" or self.hash_offset

    def with_runtime(self, runtime: str | None) -> Fabric:
        """The same fabric on another runtime (`--runtime`); None keeps the lab file's."""
        if not runtime or runtime == self.runtime:
            return self
        return dataclasses.replace(self, runtime=runtime, bfd_offload=self.bfd_offload and runtime == "netns").freeze()

    def runs_here(self, node: str) -> bool:
        """Whether this machine runs the node (always, unless the lab is a share of a split)."""
        here = self.__dict__.get("_here")
        return here is None or node in here

    def machine_of(self, node: str) -> int:
        """The 1-based machine that runs the node (1 unless the lab is split)."""
        return self.placement.get(node, 1)

    @property
    def local_nodes(self) -> list[Node]:
        """The nodes this machine runs (all of them unless the lab is a share of a split)."""
        return [n for n in self.nodes.values() if self.runs_here(n.name)]

    @property
    def local_switches(self) -> list[Node]:
        return [n for n in self.local_nodes if n.is_switch]

    @property
    def local_links(self) -> list[Link]:
        """Links with both ends on this machine (veth pairs)."""
        return [link for link in self.links if self.runs_here(link.a.node) and self.runs_here(link.b.node)]

    @property
    def seam_links(self) -> list[Link]:
        """Links with one end on this machine and the other on another (VXLAN tunnels)."""
        return [link for link in self.links if self.runs_here(link.a.node) != self.runs_here(link.b.node)]

    def by_role(self, role: Role) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == role]

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_switch]

    @property
    def hosts(self) -> list[Node]:
        return self.by_role("host")

    def switch_graph(self) -> nx.Graph:
        """The fabric without hosts (a view): hosts do not forward, so no path transits them."""
        return self.graph.subgraph(n.name for n in self.switches)

    def links_of(self, node: str) -> list[Link]:
        by_node = self.__dict__.get("_by_node")
        if by_node is not None:
            return list(by_node.get(node, ()))
        return [link for link in self.links if node in (link.a.node, link.b.node)]

    def switch_links(self) -> dict[str, set[str]]:
        """switch -> the names of its links (a switch fault shows on all of them)."""
        return {n.name: {link.name for link in self.links_of(n.name)} for n in self.switches}

    def host_nics(self) -> list[tuple[str, Endpoint]]:
        """(host name, its NIC endpoint) for every host NIC, in a stable order."""
        return [(link.b.node, link.b) for link in self.links if link.kind == "host"]

    def links_by_nic(self) -> dict[tuple[str, int], list[Link]]:
        """(host, rail) -> the host links of that NIC: one, or a dual-port NIC's two (its ports
        `nicRa`, `nicRb`), in the model's link order."""
        by_nic: dict[tuple[str, int], list[Link]] = {}
        for link in self.links:
            if link.kind == "host":
                by_nic.setdefault((link.b.node, link.rail or 1), []).append(link)
        return by_nic

    def find_link(self, a: str, b: str) -> Link | None:
        for link in self.links_of(a):
            if {link.a.node, link.b.node} == {a, b}:
                return link
        return None
