"""A switch's kernel routes as prefix -> number of next hops, from one raw netlink dump.

The convergence check asks this of every switch, round after round. pyroute2 decodes every
attribute of every next hop into objects: 0.3 s for a pod128 superspine (512 routes x 64 next
hops), 70 s for the fabric; FRR's JSON of the same table is a megabyte and 3 s of vtysh per
switch. Here only what the check needs is read: a route's destination and table, and how many
rtnexthop entries its RTA_MULTIPATH holds (struct rtmsg and rtattr, linux/rtnetlink.h).
"""

from __future__ import annotations

import socket
import struct
from ipaddress import IPv4Network

from twin.lab.kernel import rawdump

RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
TABLE = struct.Struct("=I")
RTNH_LEN = struct.Struct("=H")
RTM_NEWROUTE, RTM_GETROUTE = 24, 26
RTA_DST, RTA_MULTIPATH, RTA_TABLE = 1, 9, 15
MAIN_TABLE = 254


def route_of(data: bytes, start: int, end: int) -> tuple[str, int, int] | None:
    """(prefix "a.b.c.d/len", table, next hops) of the route message whose struct rtmsg starts
    at `start` (after its netlink header); None for another family than IPv4. The routing
    monitor reads notifications with it too (telemetry/routes.py)."""
    family, dst_len, _src, _tos, table, *_rest = RTMSG.unpack_from(data, start)
    if family != socket.AF_INET:
        return None
    dst, hops = "0.0.0.0", 1
    for kind, value, value_end in rawdump.attributes(data, start + RTMSG.size, end):
        if kind == RTA_DST:
            dst = socket.inet_ntoa(data[value:value + 4])
        elif kind == RTA_TABLE:
            table = TABLE.unpack_from(data, value)[0]
        elif kind == RTA_MULTIPATH:
            hops, hop = 0, value
            while hop + RTNH_LEN.size <= value_end:
                hop_length = RTNH_LEN.unpack_from(data, hop)[0]
                if hop_length == 0:
                    break
                hops += 1
                hop += rawdump.align(hop_length)
    return f"{dst}/{dst_len}", table, hops


def _route(data: bytes, start: int, end: int) -> tuple[IPv4Network, int] | None:
    route = route_of(data, start, end)
    if route is None or route[1] != MAIN_TABLE:
        return None
    return IPv4Network(route[0]), route[2]


def next_hop_counts(sock: socket.socket) -> dict[IPv4Network, int]:
    """Dump the main table over `sock` (an AF_NETLINK/NETLINK_ROUTE socket in the namespace)."""
    routes: dict[IPv4Network, int] = {}
    for kind, data, start, end in rawdump.dump(sock, rawdump.request(
            RTM_GETROUTE, RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0))):
        if kind == RTM_NEWROUTE:
            route = _route(data, start, end)
            if route is not None:
                routes[route[0]] = route[1]
    return routes
