"""Line-rate shaping of every link direction: a port's queue tree (model/queue_tree.py, HTB; the
kernel has no netem) sent as netlink, and its data class's rate changed and read back."""

from __future__ import annotations

from functools import lru_cache

from pyroute2 import IPRoute

from twin.lab.kernel import nlbatch
from twin.model import queue_tree
from twin.model.queue_tree import CLASS_HANDLE, HtbClass, HtbRoot, TbfQueue, U32Filter


def _keys(matches: tuple[queue_tree.HeaderField, ...]) -> list[str]:
    """pyroute2's spelling of u32 matches: value/mask+offset, the field in the word's first bytes
    (pyroute2 regroups them into words by byte; a mask with leading zero bytes would move the
    offset). No field: one match of every packet."""
    shifts = [8 * (4 - m.size) for m in matches]
    return ([f"0x{m.value << shift:08x}/0x{m.bits << shift:08x}+{m.offset}"
             for m, shift in zip(matches, shifts)] or ["0x0/0x0+0"])


def shape(ipr: IPRoute, index: int, rate_bps: int, queue_bytes: int, mtu: int, nic: bool = False) -> None:
    """The port's queue tree at line rate `rate_bps` on a lab of `mtu`, its data queue holding
    `queue_bytes` (a host NIC's: `nic`, model/queue_tree.py)."""
    for element in queue_tree.port_tree(rate_bps, queue_bytes, mtu, nic):
        match element:
            case HtbRoot(handle, default_minor):
                ipr.tc("add", "htb", index, handle=handle, default=default_minor)
            case HtbClass(handle, parent, rate, ceil, burst):
                ipr.tc("add-class", "htb", index, handle=handle, parent=parent, rate=f"{rate}bit", ceil=f"{ceil}bit",
                       burst=burst, cburst=burst)
            case TbfQueue(handle, parent, rate, burst, limit):
                ipr.tc("add", "tbf", index, handle=handle, parent=parent, rate=rate, burst=burst, limit=limit)
            case U32Filter(parent, prio, protocol, target, matches):
                ipr.tc("add-filter", "u32", index, parent=parent, prio=prio, protocol=protocol, target=target,
                       keys=_keys(matches))


@lru_cache(maxsize=64)
def requests(rate_bps: int, queue_bytes: int, mtu: int, nic: bool = False) -> list[bytes]:
    """shape()'s requests, encoded once for a (rate, queue, MTU, NIC) and sent for every port by nlbatch."""
    return nlbatch.encode(lambda batch: shape(batch, 0, rate_bps, queue_bytes, mtu, nic))


def set_class_rate(ipr: IPRoute, index: int, rate_bps: int, mtu: int, nic: bool) -> None:
    """Rate, ceiling and burst of the data class on a lab of `mtu`, a host NIC's (`nic`) or a switch's
    port (the control class or queue is left alone)."""
    data = queue_tree.data_class(rate_bps, mtu, nic)
    ipr.tc("change-class", "htb", index, handle=data.handle, parent=data.parent, rate=f"{data.rate_bps}bit",
           ceil=f"{data.ceil_bps}bit", burst=data.burst, cburst=data.burst)


def shaped_rate_bps(ipr: IPRoute, index: int) -> int | None:
    """The configured data class rate, read back from the kernel."""
    for cls in ipr.get_classes(index=index):
        if cls["handle"] == CLASS_HANDLE:
            options = cls.get_attr("TCA_OPTIONS")
            params = options.get_attr("TCA_HTB_PARMS") if options else None
            if params:
                rate64 = options.get_attr("TCA_HTB_RATE64")
                return (rate64 or params["rate"]) * 8
    return None
