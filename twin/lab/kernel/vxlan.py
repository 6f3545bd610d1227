"""The links of a split lab's share that cross to another machine: one VXLAN tunnel per link, over
the machines' underlay addresses, each the port its node would have had as a veth end.

A tunnel is created from the underlay's network namespace (the root one on a real machine; on one
box, a namespace that stands for the machine) straight into its node's namespace: the kernel keeps
the tunnel's UDP socket in the namespace it was created from, so the node sees an ordinary port
and its packets leave through the machine's address. The VNI and the UDP port are the ones the
containerlab export writes (model/partition.py, seam).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from ipaddress import IPv4Address

from pyroute2 import NetlinkError

from twin.errors import TwinError
from twin.lab.kernel.nsutil import netlink_in
from twin.model.fabric import Fabric
from twin.model.partition import VXLAN_PORT, SeamEnd, seam

# Outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8: what the underlay carries beyond the lab's MTU
VXLAN_OVERHEAD = 50
ROOT_NETNS = "/proc/1/ns/net"
NETNS_DIR = "/run/netns"
NETNS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def underlay_path(name: str | None) -> str:
    """The namespace file of the underlay: `name` under /run/netns, or the root namespace."""
    if name is None:
        return ROOT_NETNS
    if not NETNS_NAME.match(name):
        raise TwinError(f"'{name}' is not a network namespace name", hint="a name from `ip netns list`")
    path = os.path.join(NETNS_DIR, name)
    if not os.path.exists(path):
        raise TwinError(f"network namespace {name} does not exist", hint="`ip netns list` shows the namespaces")
    return path


def seam_ends(fabric: Fabric) -> list[SeamEnd]:
    """This share's ends of the links to other machines."""
    return seam(fabric, {node: machine - 1 for node, machine in fabric.placement.items()}, fabric.machine - 1)


def check_underlay(fabric: Fabric) -> None:
    """Before anything is built: this machine's address is in the underlay, and the way to every
    other machine this share has a tunnel to carries the lab's MTU plus VXLAN's overhead."""
    addresses = fabric.machine_addresses
    local = addresses[fabric.machine - 1]
    remotes = sorted({end.remote_machine for end in seam_ends(fabric)})
    where = f"namespace {fabric.underlay}" if fabric.underlay else "this machine"
    with netlink_in(underlay_path(fabric.underlay)) as ipr:
        held = {msg.get_attr("IFA_ADDRESS") for msg in ipr.get_addr(family=2)}
        if local not in held:
            raise TwinError(f"machine {fabric.machine}'s address {local} is not an address of {where}",
                            hint="--address lists the machines' underlay addresses in machine order")
        for remote in remotes:
            address = addresses[remote]
            try:
                route = ipr.route("get", dst=address)[0]
            except NetlinkError as exc:
                raise TwinError(f"machine {remote + 1} ({address}) is not reachable from {where}: {exc.args[1]}",
                                hint="the machines' underlay must route to each other's addresses") from None
            device = ipr.link("get", index=route.get_attr("RTA_OIF"))[0]
            mtu = device.get_attr("IFLA_MTU")
            if mtu < fabric.mtu + VXLAN_OVERHEAD:
                raise TwinError(
                    f"the underlay toward machine {remote + 1} ({address}, device "
                    f"{device.get_attr('IFLA_IFNAME')}) has MTU {mtu}: the lab's MTU {fabric.mtu} plus VXLAN's "
                    f"{VXLAN_OVERHEAD} bytes needs {fabric.mtu + VXLAN_OVERHEAD}",
                    hint=f"raise the underlay's MTU to {fabric.mtu + VXLAN_OVERHEAD}, or lower links.mtu in the "
                         f"lab file to {mtu - VXLAN_OVERHEAD}")


def create_tunnels(fabric: Fabric, netns_path: Callable[[str], str], done: Callable[[], None]) -> None:
    """Each seam link's local end: a VXLAN port named as the veth end would be, in its node."""
    addresses = fabric.machine_addresses
    local = str(IPv4Address(addresses[fabric.machine - 1]))
    with netlink_in(underlay_path(fabric.underlay)) as ipr:
        for end in seam_ends(fabric):
            target = os.open(netns_path(end.end.node), os.O_RDONLY)
            try:
                ipr.link("add", ifname=end.end.ifname, kind="vxlan", vxlan_id=end.vni, vxlan_local=local,
                         vxlan_group=addresses[end.remote_machine], vxlan_port=VXLAN_PORT, vxlan_learning=0,
                         mtu=fabric.mtu, net_ns_fd=target)
            except NetlinkError as exc:
                raise TwinError(f"cannot create the VXLAN port of {end.link.name} (VNI {end.vni}): {exc.args[1]}",
                                hint="another lab on this machine may use the same VNI and UDP port") from None
            finally:
                os.close(target)
            done()
