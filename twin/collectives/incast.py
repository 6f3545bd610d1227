"""An N:1 incast over the emulated RoCE transport, like perftest's ib_write_bw from N clients to one
server: every sender NIC streams messages on a QP of its own to one receiver NIC, for a while.
The NICs are driven from this process (each QP's socket opened in its host's namespace), so the
transport, its DCQCN and the fabric are the same as a job's; only the ranks are not processes.

Measured at the receiver every SAMPLE_S: the bytes each sender's QP delivered in order, hence
the receiver's goodput and each sender's share (Jain's fairness index over 1 s windows).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

from twin.lab.handle import Lab
from twin.model.nics import Nic as HostNic
from twin.roce.dcqcn import DcqcnParams
from twin.roce.nic import Nic
from twin.roce.qp import Timers, ib_timeout_s

MESSAGE_BYTES = 1 << 20
OUTSTANDING = 2  # messages posted ahead on every QP, each side
SAMPLE_S = 0.1
WINDOW_S = 1.0


@dataclass
class RoceIncastResult:
    seconds: float
    line_bps: int
    received: list[list[int]] = field(default_factory=list)  # per sample, per sender: bytes in order so far
    rates: list[list[float]] = field(default_factory=list)  # per sample, per sender: DCQCN's rate / line
    stats: dict = field(default_factory=dict)  # the transport's counters, summed over every NIC
    started: float = 0.0  # time.monotonic() of the first sample

    def goodput_bps(self, warmup_s: float = 1.0) -> float:
        first = min(len(self.received) - 1, int(warmup_s / SAMPLE_S))
        spent = (len(self.received) - 1 - first) * SAMPLE_S
        return (sum(self.received[-1]) - sum(self.received[first])) * 8 / spent if spent > 0 else 0.0

    def fairness(self, warmup_s: float = 1.0) -> list[float]:
        """Jain's index of the senders' throughput in every WINDOW_S window after the warm-up."""
        step = round(WINDOW_S / SAMPLE_S)
        first = min(len(self.received) - 1, int(warmup_s / SAMPLE_S))
        out = []
        for start in range(first, len(self.received) - step, step):
            shares = [b - a for a, b in zip(self.received[start], self.received[start + step])]
            total, squares = sum(shares), sum(s * s for s in shares)
            if squares:
                out.append(round(total * total / (len(shares) * squares), 4))
        return out


def roce_incast(lab: Lab, senders: list[HostNic], receiver: HostNic, seconds: float,
                cc: str = "dcqcn", multipath: bool = False) -> RoceIncastResult:
    """multipath: the QPs spray their packets and repeat selectively, as a job's with
    `multipath: true` (roce/selective.py)."""
    fabric = lab.fabric
    dcqcn = DcqcnParams().for_line_rate(fabric.rate_bps) if cc == "dcqcn" else None
    timers = Timers(ib_timeout_s(20), 7)

    def nic(host: HostNic) -> Nic:
        return Nic(host.address, host.device or "", fabric.mtu, timers, host.label, dcqcn,
                   new_socket=lambda: lab.socket(host.host, socket.SOCK_DGRAM), multipath=multipath,
                   ports=host.interfaces)

    server, clients = nic(receiver), [nic(s) for s in senders]
    result = RoceIncastResult(seconds, fabric.rate_bps)
    payload = bytes(MESSAGE_BYTES)
    sinks = [bytearray(MESSAGE_BYTES) for _ in range(OUTSTANDING + 1)]  # contents unread: shared by every QP
    try:
        for number, client in enumerate(clients):
            port = server.open_qp(number)
            client_port = client.open_qp(number)
            server.connect_qp(number, number, senders[number].address, client_port, senders[number].label)
            client.connect_qp(number, number, receiver.address, port, receiver.label)
        sends: list[list] = [[] for _ in clients]
        recvs: list[list] = [[] for _ in clients]
        posted = 0
        started = result.started = time.monotonic()
        next_sample = started
        while time.monotonic() - started < seconds:
            for number, client in enumerate(clients):
                sends[number] = [r for r in sends[number] if not r.done]
                while len(sends[number]) < OUTSTANDING:
                    sends[number].append(client.post_send(number, memoryview(payload)))
                recvs[number] = [r for r in recvs[number] if not r.done]
                while len(recvs[number]) < OUTSTANDING:
                    posted += 1
                    recvs[number].append(server.post_recv(number, memoryview(sinks[posted % len(sinks)])))
            now = time.monotonic()
            if now >= next_sample:
                with server.cond:
                    result.received.append([e.qp.expected * e.qp.payload for _q, e in sorted(server.endpoints.items())])
                result.rates.append([client.rate_share() for client in clients])
                next_sample += SAMPLE_S
            time.sleep(min(0.005, max(0.0, next_sample - time.monotonic())))
        totals: dict = {}
        for each in [server, *clients]:
            for key, value in vars(each.stats()).items():
                totals[key] = totals.get(key, 0) + value
        result.stats = totals
        return result
    finally:
        for each in [server, *clients]:
            each.close()
