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

NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
RTA = struct.Struct("=HH")  # len, type
RTNH_LEN = struct.Struct("=H")
NLMSG_ERROR, NLMSG_DONE, RTM_NEWROUTE, RTM_GETROUTE = 2, 3, 24, 26
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTA_DST, RTA_MULTIPATH, RTA_TABLE = 1, 9, 15
MAIN_TABLE = 254


def _align(n: int) -> int:
    return (n + 3) & ~3


def route_of(data: bytes, start: int, end: int) -> tuple[str, int, int] | None:
    """(prefix "a.b.c.d/len", table, next hops) of the route message whose struct rtmsg starts
    at `start` (after its netlink header); None for another family than IPv4. The routing
    monitor reads notifications with it too (telemetry/routes.py)."""
    family, dst_len, _src, _tos, table, *_rest = RTMSG.unpack_from(data, start)
    if family != socket.AF_INET:
        return None
    dst, hops = "0.0.0.0", 1
    at = start + RTMSG.size
    while at + RTA.size <= end:
        length, kind = RTA.unpack_from(data, at)
        if length < RTA.size:
            break
        body = at + RTA.size
        if kind == RTA_DST:
            dst = socket.inet_ntoa(data[body:body + 4])
        elif kind == RTA_TABLE:
            table = struct.unpack_from("=I", data, body)[0]
        elif kind == RTA_MULTIPATH:
            hops, hop = 0, body
            while hop + RTNH_LEN.size <= at + length:
                hop_length = RTNH_LEN.unpack_from(data, hop)[0]
                if hop_length == 0:
                    break
                hops += 1
                hop += _align(hop_length)
        at += _align(length)
    return f"{dst}/{dst_len}", table, hops


def _route(data: bytes, start: int, end: int) -> tuple[IPv4Network, int] | None:
    route = route_of(data, start, end)
    if route is None or route[1] != MAIN_TABLE:
        return None
    return IPv4Network(route[0]), route[2]


def next_hop_counts(sock: socket.socket) -> dict[IPv4Network, int]:
    """Dump the main table over `sock` (an AF_NETLINK/NETLINK_ROUTE socket in the namespace)."""
    sock.send(NLMSG.pack(NLMSG.size + RTMSG.size, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
              + RTMSG.pack(socket.AF_INET, 0, 0, 0, 0, 0, 0, 0, 0))
    routes: dict[IPv4Network, int] = {}
    while True:
        data = sock.recv(1 << 20)
        at = 0
        while at + NLMSG.size <= len(data):
            length, kind, _flags, _seq, _pid = NLMSG.unpack_from(data, at)
            if kind == NLMSG_DONE:
                return routes
            if kind == NLMSG_ERROR:
                errno = -struct.unpack_from("=i", data, at + NLMSG.size)[0]
                raise OSError(errno, f"route dump failed: {errno}")
            if kind == RTM_NEWROUTE:
                route = _route(data, at + NLMSG.size, at + length)
                if route is not None:
                    routes[route[0]] = route[1]
            at += _align(length)
