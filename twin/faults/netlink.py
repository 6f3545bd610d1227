"""Netlink actions faults share: link admin state, and the static routes a down link flushes."""

from __future__ import annotations

from twin.faults.base import FaultContext

RTPROT_STATIC = 4  # pyroute2 adds the twin's own routes (host per-NIC routing) with this protocol


def set_link_state(ctx: FaultContext, node: str, ifname: str, up: bool) -> None:
    with ctx.lab.netlink(node) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        ipr.link("set", index=index, state="up" if up else "down")


def static_routes(ctx: FaultContext, node: str, ifname: str) -> list[dict]:
    """Our own (proto static) routes through `ifname`, in every table, as re-addable dicts. The
    kernel filters the dump (strict checking; pyroute2 sends the keys as the request's fields when
    given its own empty dump_filter): a switch holds thousands of FRR routes, and parsing them all
    was most of a link_down's 0.16 s at pod128."""
    with ctx.lab.netlink(node, strict_check=True) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        return [{"dst": f"{msg.get_attr('RTA_DST') or '0.0.0.0'}/{msg['dst_len']}",
                 "gateway": msg.get_attr("RTA_GATEWAY"), "table": msg.get_attr("RTA_TABLE"), "ifname": ifname}
                for msg in ipr.route("dump", family=2, proto=RTPROT_STATIC, oif=index, dump_filter={})
                if msg["proto"] == RTPROT_STATIC and msg.get_attr("RTA_OIF") == index]  # the kernel's filter, checked


def restore_routes(ctx: FaultContext, node: str, routes: list[dict]) -> None:
    """Re-add routes the kernel flushed when the link went down (those still present are kept)."""
    with ctx.lab.netlink(node) as ipr:
        for route in routes:
            index = ipr.link_lookup(ifname=route["ifname"])[0]
            ipr.route("replace", dst=route["dst"], gateway=route["gateway"], oif=index, table=route["table"])
