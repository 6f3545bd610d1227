"""Line-rate shaping of every link direction (HTB; the kernel has no netem).

    1:    htb root, default class 1:10
    1:1   the link: rate = ceil = line rate
    1:10  data: rate = ceil = line rate; what faults slow down
      20:   its queue: a TBF gate, open far above the line rate (HTB shapes), holding up to the
            port's buffer; PFC closes it to pause the port (pfc/gate.py)
    1:20  control: ARP, BGP (TCP 179) and BFD (UDP 3784); guaranteed 1% of the line rate,
          may borrow up to all of it

Control traffic has its own class because PFC pauses one priority, not the port: a paused
data class must not stop ARP replies, BGP keepalives or BFD, as it would not on a real switch.
"""

from __future__ import annotations

from functools import lru_cache

from pyroute2 import IPRoute

from twin.lab import nlbatch

ROOT_HANDLE = 0x10000  # 1:
LINK_HANDLE = 0x10001  # 1:1
CLASS_HANDLE = 0x10010  # 1:10, data
CONTROL_HANDLE = 0x10020  # 1:20, control plane
GATE_HANDLE = 0x200000  # 20:, the data class's queue
GATE_OPEN_RATE = "10gbit"
GATE_OPEN_BURST = 256 * 1024  # larger than a GSO super-packet, which TBF would otherwise split
CONTROL_SHARE = 0.01
ETH_P_ARP, ETH_P_IP = 0x0806, 0x0800
IPPROTO_TCP, IPPROTO_UDP = 6, 17
BGP_PORT, BFD_PORT = 179, 3784


def _port_keys(proto: int, port: int, source: bool) -> list[str]:
    """u32 keys: IP protocol (byte 9) and a port (bytes 20-21 source, 22-23 destination;
    IP headers here carry no options)."""
    port_key = f"0x{port << 16:08x}/0xffff0000+20" if source else f"0x{port:08x}/0x0000ffff+20"
    return [f"0x{proto << 16:08x}/0x00ff0000+8", port_key]


CONTROL_FILTERS = [
    (ETH_P_ARP, ["0x0/0x0+0"]),
    (ETH_P_IP, _port_keys(IPPROTO_TCP, BGP_PORT, source=False)),
    (ETH_P_IP, _port_keys(IPPROTO_TCP, BGP_PORT, source=True)),
    (ETH_P_IP, _port_keys(IPPROTO_UDP, BFD_PORT, source=False)),
]


def shape(ipr: IPRoute, index: int, rate_bps: int, queue_bytes: int) -> None:
    """HTB at the line rate, the data class's queue of `queue_bytes`, the control class."""
    line = f"{rate_bps}bit"
    ipr.tc("add", "htb", index, handle=ROOT_HANDLE, default=0x10)
    ipr.tc("add-class", "htb", index, handle=LINK_HANDLE, parent=ROOT_HANDLE, rate=line, ceil=line)
    set_class_rate(ipr, index, rate_bps, command="add-class")
    ipr.tc("add", "tbf", index, handle=GATE_HANDLE, parent=CLASS_HANDLE, rate=GATE_OPEN_RATE,
           burst=GATE_OPEN_BURST, limit=queue_bytes)
    control = f"{max(int(rate_bps * CONTROL_SHARE), 8000)}bit"
    ipr.tc("add-class", "htb", index, handle=CONTROL_HANDLE, parent=LINK_HANDLE, rate=control, ceil=line)
    for prio, (protocol, keys) in enumerate(CONTROL_FILTERS, start=1):
        ipr.tc("add-filter", "u32", index, parent=ROOT_HANDLE, prio=prio, protocol=protocol,
               target=CONTROL_HANDLE, keys=keys)


@lru_cache(maxsize=64)
def requests(rate_bps: int, queue_bytes: int) -> list[bytes]:
    """shape()'s requests, encoded once for a (rate, queue) and sent for every port by nlbatch."""
    return nlbatch.encode(lambda batch: shape(batch, 0, rate_bps, queue_bytes))


def set_class_rate(ipr: IPRoute, index: int, rate_bps: int, command: str = "change-class") -> None:
    """Rate and ceiling of the data class (the control class is left alone)."""
    rate = f"{rate_bps}bit"
    ipr.tc(command, "htb", index, handle=CLASS_HANDLE, parent=LINK_HANDLE, rate=rate, ceil=rate)


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
