"""The parse of kernel route messages that the routing monitor (telemetry/routes.py) and the
convergence check share (lab/kernel/fib.py), checked against pyroute2's encoder and decoder."""

from pyroute2.netlink.rtnl.rtmsg import rtmsg

from twin.lab.kernel.fib import route_of
from twin.telemetry.routes import RTM_DELROUTE, RTM_NEWROUTE


def encoded(kind, dst, dst_len, table, next_hops):
    msg = rtmsg()
    msg["header"]["type"] = kind
    msg["family"], msg["dst_len"], msg["table"] = 2, dst_len, min(table, 252)
    attrs = [("RTA_DST", dst), ("RTA_TABLE", table), ("RTA_PRIORITY", 20)]
    if len(next_hops) > 1:
        attrs.append(("RTA_MULTIPATH", [{"oif": oif, "hops": 0, "attrs": [("RTA_GATEWAY", gw)]}
                                        for oif, gw in next_hops]))
    elif next_hops:
        attrs += [("RTA_OIF", next_hops[0][0]), ("RTA_GATEWAY", next_hops[0][1])]
    msg["attrs"] = attrs
    msg.encode()
    return bytes(msg.data)


def test_prefix_table_and_next_hops_match_pyroute2s_reading():
    cases = [(RTM_NEWROUTE, "10.1.0.6", 31, 254, [(3, "10.0.0.1"), (4, "10.0.0.3"), (5, "10.0.0.5")]),
             (RTM_NEWROUTE, "10.8.3.0", 31, 254, [(7, "10.0.0.9")]),
             (RTM_DELROUTE, "10.1.0.6", 31, 254, []),
             (RTM_NEWROUTE, "192.168.0.0", 24, 1000, [(3, "10.0.0.1"), (4, "10.0.0.3")])]
    stream = b"".join(encoded(*case) for case in cases)
    offset, seen = 0, []
    while offset < len(stream):
        length = int.from_bytes(stream[offset:offset + 4], "little")
        theirs = rtmsg(stream[offset:offset + length])
        theirs.decode()
        hops = theirs.get_attr("RTA_MULTIPATH")
        assert route_of(stream, offset + 16, offset + length) == (
            f"{theirs.get_attr('RTA_DST')}/{theirs['dst_len']}", theirs.get_attr("RTA_TABLE"),
            len(hops) if hops else 1)
        seen.append(route_of(stream, offset + 16, offset + length))
        offset += (length + 3) & ~3
    assert seen == [("10.1.0.6/31", 254, 3), ("10.8.3.0/31", 254, 1), ("10.1.0.6/31", 254, 1),
                    ("192.168.0.0/24", 1000, 2)]
