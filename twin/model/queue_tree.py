"""A port's queue tree, as data: what every link direction's egress holds. The bring-up sends it to
the kernel as netlink (lab/kernel/shaping.py), the containerlab export writes it as tc commands
(model/export.py): one tree, two spellings, so an exported lab's ports are the twin's.

A switch's port:

    1:    htb root, default class 1:10; control (ARP, BGP on TCP 179, BFD on UDP 3784) to its
          direct queue, 1:0, sent before any class and never paused
    1:10  data: rate = ceil = line rate; what faults slow down
      20:   its queue: a TBF gate, open far above the line rate (HTB shapes), holding up to the
            port's buffer; PFC closes it to pause the port (lab/pfc/gate.py)

A host's NIC:

    1:    htb root, default class 1:10
    1:1   the link: rate = ceil = line rate
    1:10  data, as on a switch, with its gate 20:
    1:20  control, and the emulated RoCE transport's responses (ACK, NAK, SACK, CNP): guaranteed
          1% of the line rate and a response per data packet, may borrow up to all of it
    every class's burst: two frames, or a frame and 0.25 ms of its rate (SHAPER_SLACK_S below)

Control traffic is never behind the data because PFC pauses one priority, not the port: a paused
data class must not stop ARP replies, BGP keepalives or BFD, as it would not on a real switch.

A switch's control goes unshaped, ahead of the data, as a switch's CPU-bound traffic goes in its
highest priority: a few hundred bytes a second at rest, BGP's updates at a bring-up. Each HTB
qdisc and class binds a tc filter block, and the kernel files every block bound on one list it
searches linearly at each bind (docs/benchmarks.md, AIPod): a switch port's two blocks instead of
four (a link and a control class) make that walk a third as long on AIPod's 20,480 ports.

A NIC keeps its control class because its responses are not a few bytes: one per data packet (a
SACK per packet out of order: 4 % of the line at MTU 1500), which unshaped would send the NIC
above its line. They skip the data queue because an RDMA NIC's transport engine sends them as
they are due, between its own data packets; it keeps no host-side queue for them to wait in. The
twin's host queues the data its sockets hold (roce/nic.py SEND_BUFFER, 14 jumbo frames: 5 ms at
200 Mbit/s), and responses behind it made a healthy sprayed ring's senders see no ACK for 5-28 ms
and probe for lost packets, resending 1,500-2,800 packets a run that had arrived (issue 30's
collision ring, 0.60-0.68 of line; 0.68-0.78 with responses in this class: docs/benchmarks.md).
In a switch they stay with the data (a real fabric carries them in the data's priority). They are
not paused by PFC at the NIC either, where a real NIC's ACKs would be (CNPs usually have a
priority of their own): a few bytes a packet.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.model.buffers import frame_bytes

ROOT_HANDLE = 0x10000  # 1:, and as a filter's target the root's direct queue (1:0)
LINK_HANDLE = 0x10001  # 1:1
CLASS_HANDLE = 0x10010  # 1:10, data
CONTROL_HANDLE = 0x10020  # 1:20, control plane
GATE_HANDLE = 0x200000  # 20:, the data class's queue
GATE_OPEN_RATE = "10gbit"
# larger than a GSO super-packet, which TBF would otherwise split. The kernel keeps a burst as time,
# and tc and pyroute2 round bytes to time differently: 262,144 B became 261,250 B by tc and 260,000 B
# by pyroute2; 262,500 B is 261,250 B by both, so an exported port holds what a twin's port holds
GATE_OPEN_BURST = 262_500
# A shaper's burst. HTB sends a class's next packet when the class has gathered the tokens for it,
# and waits for them on a timer; a CPU wakes for that timer late (on a VM, for as long as its host
# takes to run the vCPU), and what the class gathered meanwhile, up to its burst, makes up for it.
# The kernel's default burst (tc's and pyroute2's, about 1,600 B) is under one jumbo frame: every
# late wake-up lost its lateness of line time for good, and one TCP flow across rail4 ran at
# 178-186 Mbit/s of 200 on a slow VM (2026-12-02; 194-198 with two frames, docs/benchmarks.md,
# "The shapers' burst"). A real port never sends faster than its line; the burst lets a shaper
# send above it only what a late timer held back, or after an idle spell, at most one frame and
# SHAPER_SLACK_S of line time back to back: below the ECN threshold Kmin of the queue behind it
# (model/buffers.py: 0.5 ms of line time and 3 frames at least), so a burst alone is never marked.
SHAPER_SLACK_S = 0.00025
CONTROL_SHARE = 0.01
CONTROL_FLOOR_BPS = 8000
ETH_P_ARP, ETH_P_IP = 0x0806, 0x0800
IPPROTO_TCP, IPPROTO_UDP = 6, 17
ETHERNET_HEADER_BYTES = 14
BGP_PORT, BFD_PORT = 179, 3784


@dataclass(frozen=True)
class HtbRoot:
    handle: int
    default_minor: int  # the class unclassified packets go to


@dataclass(frozen=True)
class HtbClass:
    handle: int
    parent: int
    rate_bps: int
    ceil_bps: int
    burst: int  # bytes, at the rate and at the ceiling (shaper_burst)


@dataclass(frozen=True)
class TbfQueue:
    handle: int
    parent: int
    rate: str
    burst: int
    limit: int


@dataclass(frozen=True)
class HeaderField:
    """`size` bytes (1, 2 or 4) `offset` bytes into the network header, equal to `value` in the
    bits `mask` keeps (all of them: None)."""
    offset: int
    size: int
    value: int
    mask: int | None = None

    @property
    def bits(self) -> int:
        return (1 << 8 * self.size) - 1 if self.mask is None else self.mask


@dataclass(frozen=True)
class U32Filter:
    parent: int
    prio: int
    protocol: int  # an ethertype
    target: int
    matches: tuple[HeaderField, ...]  # all of them; none: every packet


Element = HtbRoot | HtbClass | TbfQueue | U32Filter


def _port_matches(proto: int, port: int, source: bool) -> tuple[HeaderField, ...]:
    """The IP protocol (byte 9) and a port (bytes 20-21 source, 22-23 destination; IP headers here
    carry no options)."""
    return HeaderField(9, 1, proto), HeaderField(20 if source else 22, 2, port)


CONTROL_MATCHES = (
    (ETH_P_ARP, ()),
    (ETH_P_IP, _port_matches(IPPROTO_TCP, BGP_PORT, source=False)),
    (ETH_P_IP, _port_matches(IPPROTO_TCP, BGP_PORT, source=True)),
    (ETH_P_IP, _port_matches(IPPROTO_UDP, BFD_PORT, source=False)),
)


# The emulated RoCE transport's header opens the UDP payload (byte 28 of an IP header without
# options): its magic, then its opcode (twin/roce/wire.py; tests/unit/test_queue_tree.py holds
# them equal). ACK 2 and NAK 3 share all but the opcode's last bit, as CNP 4 and SACK 5 do.
ROCE_MAGIC = 0xC5
ROCE_RESPONSES = ((2, 3), (4, 5))
ROCE_RESPONSE_BYTES = ETHERNET_HEADER_BYTES + 20 + 8 + 24  # a response's frame: its header, no payload
RESPONSE_MATCHES = tuple(
    (ETH_P_IP, (HeaderField(9, 1, IPPROTO_UDP), HeaderField(28, 2, ROCE_MAGIC << 8 | pair[0], mask=0xFFFE)))
    for pair in ROCE_RESPONSES)


def shaper_burst(rate_bps: int, mtu: int) -> int:
    """A class's burst at `rate_bps` on a lab of `mtu` (SHAPER_SLACK_S): one frame, and one more or
    SHAPER_SLACK_S of line time, whichever is more."""
    frame = frame_bytes(mtu)
    return frame + max(frame, int(rate_bps * SHAPER_SLACK_S / 8))


def data_class(rate_bps: int, mtu: int, nic: bool = False) -> HtbClass:
    """The data class at `rate_bps` on a lab of `mtu` (a slow-link fault changes only this): under the
    link class on a host's NIC (`nic`), the root's own class on a switch."""
    return HtbClass(CLASS_HANDLE, LINK_HANDLE if nic else ROOT_HANDLE, rate_bps, rate_bps, shaper_burst(rate_bps, mtu))


def port_tree(rate_bps: int, queue_bytes: int, mtu: int, nic: bool = False) -> tuple[Element, ...]:
    """A port's tree at line rate `rate_bps` on a lab of `mtu`, its data queue holding `queue_bytes`,
    in the order the elements are made (a parent before its children). A switch's control goes to
    the root's direct queue; a host NIC's port (`nic`) sends it, and the RoCE transport's responses,
    in a control class guaranteed a response for every data packet. Its 1 % would not do: beyond
    its guarantee a class borrows only what the data leaves unused, and under load the data uses
    the whole line."""
    gate = TbfQueue(GATE_HANDLE, CLASS_HANDLE, GATE_OPEN_RATE, GATE_OPEN_BURST, queue_bytes)
    root = HtbRoot(ROOT_HANDLE, CLASS_HANDLE & 0xFFFF)
    if not nic:
        return (root, data_class(rate_bps, mtu), gate,
                *(U32Filter(ROOT_HANDLE, prio, protocol, ROOT_HANDLE, matches)
                  for prio, (protocol, matches) in enumerate(CONTROL_MATCHES, start=1)))
    control_bps = max(int(rate_bps * CONTROL_SHARE), CONTROL_FLOOR_BPS,
                      -(-rate_bps * ROCE_RESPONSE_BYTES // frame_bytes(mtu)))
    burst = shaper_burst(rate_bps, mtu)
    return (root,
            HtbClass(LINK_HANDLE, ROOT_HANDLE, rate_bps, rate_bps, burst),
            data_class(rate_bps, mtu, nic),
            gate,
            HtbClass(CONTROL_HANDLE, LINK_HANDLE, control_bps, rate_bps, burst),
            *(U32Filter(ROOT_HANDLE, prio, protocol, CONTROL_HANDLE, matches)
              for prio, (protocol, matches) in enumerate(CONTROL_MATCHES + RESPONSE_MATCHES, start=1)))


def tc_handle(handle: int) -> str:
    """tc's spelling of a handle: major and minor in hex, '1:' for a qdisc's, '1:10' for a class's."""
    major, minor = handle >> 16, handle & 0xFFFF
    return f"{major:x}:{minor:x}" if minor else f"{major:x}:"


ETHERTYPE_NAMES = {ETH_P_ARP: "arp", ETH_P_IP: "ip"}


def tc_commands(tree: tuple[Element, ...], dev: str) -> list[list[str]]:
    """`tc` argument lists that make `tree` on `dev` (replacing a root qdisc that is there, and with
    it its classes and filters)."""
    commands = []
    for element in tree:
        match element:
            case HtbRoot(handle, default_minor):
                commands.append(["qdisc", "replace", "dev", dev, "root", "handle", tc_handle(handle),
                                 "htb", "default", f"{default_minor:x}"])
            case HtbClass(handle, parent, rate_bps, ceil_bps, burst):
                commands.append(["class", "replace", "dev", dev, "parent", tc_handle(parent), "classid",
                                 tc_handle(handle), "htb", "rate", f"{rate_bps}bit", "ceil", f"{ceil_bps}bit",
                                 "burst", str(burst), "cburst", str(burst)])
            case TbfQueue(handle, parent, rate, burst, limit):
                commands.append(["qdisc", "replace", "dev", dev, "parent", tc_handle(parent), "handle",
                                 tc_handle(handle), "tbf", "rate", rate, "burst", str(burst), "limit", str(limit)])
            case U32Filter(parent, prio, protocol, target, matches):
                words = [part for m in matches for part in
                         ("match", f"u{8 * m.size}", hex(m.value), hex(m.bits), "at", str(m.offset))]
                commands.append(["filter", "add", "dev", dev, "parent", tc_handle(parent), "protocol",
                                 ETHERTYPE_NAMES[protocol], "prio", str(prio), "u32",
                                 *(words or ["match", "u32", "0", "0", "at", "0"]),
                                 "flowid", tc_handle(target)])
    return commands
