"""Adaptive routing and deterministic path control on a real lab (routing.load_balance: packet,
hash_offset: true): two marked (reorderable) flows the kernel's ECMP hash puts on one leaf uplink
are spread over both by their queues, at line rate and without a pause, where the same flows
unmarked share one uplink (the one `twin lab path` computes for their offsets) and pause; an
uplink that is down is never chosen; a multipath RoCE collective (selective repeat) is correct
over the sprayed fabric; a RoCE QP dodges a black hole on its path by its path offset."""

import socket
import threading
import time
from ipaddress import ip_address

import pytest

from twin.collectives.bench import run_bench
from twin.faults import engine
from twin.faults.base import FaultContext
from twin.lab.pfc.client import port_counters_now
from twin.lab.ports.counters import CounterReader
from twin.lab.traffic import bound_udp_socket
from twin.model import pathhash
from twin.model.nics import fabric_nics
from twin.roce.nic import Nic
from twin.roce.qp import Timers, TransportError, ib_timeout_s
from twin.roce.wire import REORDERABLE_DSCP

from .helpers import lab_copy, lab_running

# One worker for the module: its tests share the module's lab (`sprayed`), and a second worker
# would bring up its own under the same name, then take it down under the first one's tests.
pytestmark = [pytest.mark.integration, pytest.mark.own_labs, pytest.mark.xdist_group("spray-lab")]
PACKETS = 1500
DATAGRAM = 8000  # a jumbo frame each
PORT = 47000
MARKED, UNMARKED = REORDERABLE_DSCP << 2, 0
UPLINKS = ("sp-1", "sp-2")  # leaf-g2-r1's ports toward spine-1 and spine-2
FLOWS = (("host-g2-h1:nic1", "host-g1-h1:nic1"), ("host-g2-h2:nic1", "host-g1-h2:nic1"))  # both up leaf-g2-r1
SENDERS = tuple(tuple(src.split(":")) for src, _dst in FLOWS)  # their ports, as the pause counters name them


@pytest.fixture(scope="module")
def sprayed(tmp_path_factory):
    path = lab_copy(tmp_path_factory.mktemp("balance"), "mini", "spray")
    path.write_text(path.read_text().replace("  ecmp_hash: l4\n",
                                             "  ecmp_hash: l4\n  load_balance: packet\n  hash_offset: true\n"))
    with lab_running(str(path), "netns") as lab:
        yield lab


def uplink_packets(lab) -> dict[str, int]:
    with CounterReader(lab) as reader:
        snap = reader.read(checksums=False)
    return {ifname: snap.interfaces[("leaf-g2-r1", ifname)]["tx_packets"] for ifname in UPLINKS}


def kernel_uplink(lab, flow: tuple[str, str], sport: int) -> str:
    """The uplink the kernel's ECMP hash gives a marked flow: 20 packets, too slowly to queue,
    so adaptive routing leaves them where the kernel put them."""
    nics = {n.label: n for n in fabric_nics(lab.fabric)}
    sock = bound_udp_socket(lab, nics[flow[0]], sport)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, MARKED)
    before = uplink_packets(lab)
    for _ in range(20):
        sock.sendto(b"x" * 100, (nics[flow[1]].address, PORT))
        time.sleep(0.002)
    sock.close()
    after = uplink_packets(lab)
    return max(UPLINKS, key=lambda ifname: after[ifname] - before[ifname])


def both_flows(lab, tos: int, sports: tuple[int, int]) -> dict:
    """FLOWS at once, PACKETS jumbo datagrams each as fast as their NICs take them: the packets
    each uplink of leaf-g2-r1 sent, how many arrived, how long sending took, the pauses (and the
    ports that received them) and the packets adaptive routing moved meanwhile."""
    nics = {n.label: n for n in fabric_nics(lab.fabric)}
    arrived = [set() for _ in FLOWS]
    sockets, threads = [], []

    def receive(number, sock):
        sock.settimeout(2.0)
        try:
            while len(arrived[number]) < PACKETS:
                arrived[number].add(int.from_bytes(sock.recv(DATAGRAM)[:4], "big"))
        except TimeoutError:
            pass

    def send(sock, address):
        for seq in range(PACKETS):
            sock.sendto(seq.to_bytes(4, "big").ljust(DATAGRAM, b"\0"), (address, PORT))

    for number, ((src, dst), sport) in enumerate(zip(FLOWS, sports)):
        receiver, sender = bound_udp_socket(lab, nics[dst], PORT), bound_udp_socket(lab, nics[src], sport)
        sender.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        sockets += [receiver, sender]
        threads += [threading.Thread(target=receive, args=(number, receiver)),
                    threading.Thread(target=send, args=(sender, nics[dst].address))]
    counted = port_counters_now(lab.paths.root)  # first, as BFD counts on the uplinks
    before = uplink_packets(lab)
    started = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        for thread in threads[1::2]:
            thread.join()
        sending_s = time.monotonic() - started
        for thread in threads[::2]:
            thread.join()
    finally:
        for sock in sockets:
            sock.close()
    after = uplink_packets(lab)
    now = port_counters_now(lab.paths.root)
    return {"uplinks": {ifname: after[ifname] - before[ifname] for ifname in UPLINKS},
            "arrived": [len(a) for a in arrived], "sending_s": sending_s,
            "pauses": sum(now[port].rx_pause - counted[port].rx_pause for port in now),
            "paused": {port: now[port].rx_pause - counted[port].rx_pause for port in now
                       if now[port].rx_pause > counted[port].rx_pause},
            "moved": sum(now[port].steered_in - counted[port].steered_in for port in now)}


def colliding_sports(lab) -> tuple[int, int]:
    """Source ports for FLOWS that the kernel's hash puts on one uplink (it is seeded per switch
    name, so the search ends the same way every time)."""
    first = kernel_uplink(lab, FLOWS[0], 47100)
    for sport in range(47101, 47164):
        if kernel_uplink(lab, FLOWS[1], sport) == first:
            return 47100, sport
    pytest.fail("no source port in 63 collides with the first flow: the kernel's hash is not ECMP")


def sender_pauses(result: dict) -> int:
    return sum(result["paused"].get(port, 0) for port in SENDERS)


def test_marked_flows_the_kernel_collides_are_spread_over_the_uplinks(sprayed):
    result = both_flows(sprayed, MARKED, colliding_sports(sprayed))
    assert result["arrived"] == [PACKETS, PACKETS], result
    assert min(result["uplinks"].values()) >= 0.4 * PACKETS, result  # both uplinks carried half
    assert result["moved"] >= 0.3 * PACKETS, result  # off the kernel's choice, by the program
    # The load went where there was room: the same flows on one uplink, unmarked, have their
    # senders paused about 180 times each here; spread, the senders get at most a tenth of that.
    # Not none: every link of the path is then exactly full (two line-rate flows over two uplinks,
    # two spines' links and two host links), so a queue that a late shaper tick or a run of
    # per-packet choices builds is never drained; it reaches XOFF 0-30 times a run, anywhere on the
    # path, and its pauses travel back (measured 2026-12-02; the test once asserted none).
    shared = both_flows(sprayed, UNMARKED, sharing_sports(sprayed))
    assert sender_pauses(result) <= sender_pauses(shared) / 10, (result["paused"], shared["paused"])


def leaf_egress(paths: pathhash.Paths, flow: tuple[str, str], sport: int) -> str:
    """The uplink of leaf-g2-r1 an unmarked packet of `flow` from `sport` takes, by the model."""
    nics = {n.label: n for n in fabric_nics(paths.fabric)}
    hops = paths.path(ip_address(nics[flow[0]].address), ip_address(nics[flow[1]].address), 17, sport, PORT)
    return hops[1].egress.ifname


def sharing_sports(lab) -> tuple[int, int]:
    """Source ports that put FLOWS, unmarked, on one uplink: the first flow at offset 0, the
    second from the first port the model sends the same way."""
    paths, first = pathhash.Paths(lab.fabric), pathhash.with_offset(47100, 0)
    uplink = leaf_egress(paths, FLOWS[0], first)
    return first, next(s for s in range(47100, 47400) if leaf_egress(paths, FLOWS[1], s) == uplink)


def test_unmarked_flows_take_the_paths_their_offsets_name(sprayed):
    # offsets one apart leave by different uplinks; two flows on one named uplink share it
    paths = pathhash.Paths(sprayed.fabric)
    first = [leaf_egress(paths, FLOWS[0], pathhash.with_offset(47100, offset)) for offset in range(4)]
    assert first[0] != first[1] and first[1] != first[2], first
    result = both_flows(sprayed, UNMARKED, sharing_sports(sprayed))
    assert result["arrived"] == [PACKETS, PACKETS], result
    assert result["uplinks"][first[0]] >= 2 * PACKETS and min(result["uplinks"].values()) <= 20, result
    assert result["moved"] == 0 and result["pauses"] > 0, result  # one uplink for two: PFC held the senders


def test_an_uplink_that_is_down_is_never_chosen(sprayed):
    sports = colliding_sports(sprayed)
    timing, params = engine.parse({"id": "cut", "kind": "link_down", "link": "leaf-g2-r1 -- spine-1"})
    engine.inject(FaultContext(sprayed), timing, params)
    try:
        result = both_flows(sprayed, MARKED, sports)
    finally:
        engine.clear(FaultContext(sprayed), "cut")
    assert result["arrived"] == [PACKETS, PACKETS], result
    assert result["uplinks"]["sp-1"] == 0 and result["uplinks"]["sp-2"] >= 2 * PACKETS, result


def test_a_multipath_roce_allreduce_is_correct_over_sprayed_paths(sprayed):
    result = run_bench(sprayed, "allreduce", [4 * 1024 * 1024], iters=3, warmup=1, timeout_s=120,
                       transport="roce", roce={"ib_timeout": 20, "retry_cnt": 7, "qps_per_connection": 1,
                                               "time_scale": 1.0, "multipath": True})
    (measurement,) = result.measurements
    assert measurement.wrong == 0, measurement
    stats = measurement.transport
    assert stats["timeouts"] == 0 and stats["naks_sent"] == 0, stats  # selective repeat: no go-back-N


def roce_nic(lab, nic, timers: Timers, path_offsets: int) -> Nic:
    return Nic(nic.address, nic.ifname, lab.fabric.mtu, timers, nic.label, path_offsets=path_offsets,
               new_socket=lambda: lab.socket(nic.host, socket.SOCK_DGRAM))


def spine_of(lab, src, dst, sport: int, dport: int) -> str:
    hops = pathhash.Paths(lab.fabric).path(ip_address(src.address), ip_address(dst.address),
                                           pathhash.PROTOCOLS["udp"], sport, dport)
    (spine,) = [hop.node for hop in hops if hop.node.startswith("spine")]
    return spine


@pytest.mark.parametrize("dodging", [True, False])
def test_a_roce_qp_dodges_a_black_hole_on_its_path(sprayed, dodging):
    """A QP's data toward host-g1-h1 black-holed by the spine its path offset names (the model's
    path, so the hole is on it whatever port the QP got): dodging, it moves to the next offset,
    the other spine, and its message arrives whole with no timeout; without, its retries die in
    the hole and the QP fails."""
    nics = {n.label: n for n in fabric_nics(sprayed.fabric)}
    src, dst = nics["host-g2-h1:nic1"], nics["host-g1-h1:nic1"]
    timers = Timers(ib_timeout_s(20), 7) if dodging else Timers(0.3, 1)
    offsets = pathhash.OFFSET_MASK + 1 if dodging else 0
    sender, receiver = roce_nic(sprayed, src, timers, offsets), roce_nic(sprayed, dst, timers, offsets)
    try:
        sport, dport = sender.open_qp(1), receiver.open_qp(1)
        sender.connect_qp(1, 1, dst.address, dport, dst.label)
        receiver.connect_qp(1, 1, src.address, sport, src.label)
        spine = spine_of(sprayed, src, dst, sport, dport)
        timing, params = engine.parse({"id": "hole", "kind": "blackhole", "node": spine, "host": "host-g1-h1"})
        engine.inject(FaultContext(sprayed), timing, params)
        try:
            data = bytes(range(256)) * 4096 * 4  # 4 MiB
            buffer = bytearray(len(data))
            recv = receiver.post_recv(1, memoryview(buffer))
            send = sender.post_send(1, memoryview(data))
            if not dodging:
                with pytest.raises(TransportError, match="retry count exceeded"):
                    sender.wait([send], 30, "send")
                return
            sender.wait([send], 30, "send")
            receiver.wait([recv], 30)
        finally:
            engine.clear(FaultContext(sprayed), "hole")
        assert bytes(buffer) == data
        stats = sender.stats()
        now = next(s for s in sender.qp_states() if s["qp"] == 1)["sport"]
        assert stats.dodges >= 1 and stats.timeouts == 0, stats
        assert spine_of(sprayed, src, dst, now, dport) != spine, (sport, now)
    finally:
        sender.close()
        receiver.close()
