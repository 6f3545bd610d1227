"""Dual-port NICs (fabric.nic_ports: 2) on a real lab: every NIC's two ports go to two leaves of
its rail, its one address is reachable through both, and its host spreads its flows over both.
TCP streams between two NICs of different groups use both of the sender's ports; when one of the
sender's leaves dies (switch_down) they keep going through the other port; with that port down
too they stop, which is what a single-port NIC does when its one leaf dies (the test can fail)."""

import socket
import threading
import time

import pytest

from twin.faults import engine
from twin.faults.base import FaultContext
from twin.lab.ports.counters import CounterReader
from twin.model.nics import fabric_nics

from .helpers import lab_copy, lab_running

pytestmark = [pytest.mark.integration, pytest.mark.own_labs, pytest.mark.xdist_group("dual-port")]
SENDER, RECEIVER = "host-g1-h1:nic1", "host-g2-h1:nic1"
FLOWS = 16  # all on one port: 2 in 65,536 draws of the hosts' hash
PORT = 47010
CHUNK = bytes(64 * 1024)


@pytest.fixture(scope="module")
def dual(tmp_path_factory):
    path = lab_copy(tmp_path_factory.mktemp("dual-port"), "mini-dual", "dualport")
    with lab_running(str(path), "netns") as lab:
        yield lab


class Streams:
    """FLOWS TCP connections from SENDER's address to RECEIVER's, each sending as fast as it can;
    `received` counts what arrived."""

    def __init__(self, lab):
        nics = {nic.label: nic for nic in fabric_nics(lab.fabric)}
        sender, receiver = nics[SENDER], nics[RECEIVER]
        self.received, self.stop = 0, threading.Event()
        self.lock = threading.Lock()
        listener = lab.socket(receiver.host, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((receiver.address, PORT))
        listener.listen(FLOWS)
        self.clients = []
        for _ in range(FLOWS):
            client = lab.socket(sender.host, socket.SOCK_STREAM)
            client.bind((sender.address, 0))  # no device: the host's routes pick the port
            client.connect((receiver.address, PORT))
            client.settimeout(0.2)
            self.clients.append(client)
        self.servers = [listener.accept()[0] for _ in range(FLOWS)]
        listener.close()
        for server in self.servers:
            server.settimeout(0.2)
        self.threads = [threading.Thread(target=self._send, args=(c,), daemon=True) for c in self.clients]
        self.threads += [threading.Thread(target=self._receive, args=(s,), daemon=True) for s in self.servers]
        for thread in self.threads:
            thread.start()

    def _send(self, sock) -> None:
        while not self.stop.is_set():
            try:
                sock.send(CHUNK)
            except TimeoutError:
                continue
            except OSError:
                return

    def _receive(self, sock) -> None:
        while not self.stop.is_set():
            try:
                got = len(sock.recv(1 << 16))
            except TimeoutError:
                continue
            except OSError:
                return
            with self.lock:
                self.received += got

    def arriving_over(self, seconds: float) -> int:
        """Bytes that arrived over the next `seconds`."""
        with self.lock:
            before = self.received
        time.sleep(seconds)
        with self.lock:
            return self.received - before

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)
        for sock in self.clients + self.servers:
            sock.close()


def port_tx_bytes(lab) -> dict[str, int]:
    host = SENDER.split(":")[0]
    with CounterReader(lab) as reader:
        snap = reader.read(checksums=False)
    return {ifname: snap.interfaces[(host, ifname)]["tx_bytes"] for ifname in ("nic1a", "nic1b")}


def fault(lab, entry: dict):
    timing, params = engine.parse(entry)
    engine.inject(FaultContext(lab), timing, params)


def test_a_dual_port_nic_keeps_sending_through_its_other_leaf_and_stops_without_it(dual):
    streams = Streams(dual)
    try:
        streams.arriving_over(0.5)  # past the connections' slow start
        before = port_tx_bytes(dual)
        assert streams.arriving_over(1.0) > 0
        after = port_tx_bytes(dual)
        sent = {ifname: after[ifname] - before[ifname] for ifname in after}
        assert min(sent.values()) > 0.1 * sum(sent.values()), f"one port carried (almost) everything: {sent}"

        fault(dual, {"id": "tor", "kind": "switch_down", "node": "leaf-g1-r1-a"})
        try:
            streams.arriving_over(0.5)  # the flows on the dead port wait for their retransmission
            before = port_tx_bytes(dual)
            moving = streams.arriving_over(1.0)
            after = port_tx_bytes(dual)
            assert moving > 1_000_000, f"{moving} bytes in a second with leaf -b up"
            assert after["nic1a"] == before["nic1a"] and after["nic1b"] > before["nic1b"] + moving // 2

            fault(dual, {"id": "port-b", "kind": "link_down", "link": "leaf-g1-r1-b -- host-g1-h1"})
            try:
                streams.arriving_over(0.5)  # what the receiver's socket buffers still held
                assert streams.arriving_over(1.0) == 0, "the NIC sent with both of its ports down"
            finally:
                engine.clear(FaultContext(dual), "port-b")
        finally:
            engine.clear(FaultContext(dual), "tor")
    finally:
        streams.close()


def test_a_roce_qp_moves_to_the_other_port_when_its_leaf_dies(dual):
    """One RC QP (lane 0: port a) streams to a NIC of the other group; leaf -a of the sender dies
    mid-stream. The NIC moves the QP to port b (its LAG), the receiver's NAK has the lost packets
    sent again, and the stream goes on; a NIC that left its QP on the dead port sends nothing."""
    from twin.collectives.incast import SAMPLE_S, roce_incast

    nics = {nic.label: nic for nic in fabric_nics(dual.fabric)}
    outcome = {}
    stream = threading.Thread(target=lambda: outcome.update(
        result=roce_incast(dual, [nics[SENDER]], nics[RECEIVER], 5.0, cc="none")))
    stream.start()
    time.sleep(1.5)
    before = port_tx_bytes(dual)
    fault(dual, {"id": "tor", "kind": "switch_down", "node": "leaf-g1-r1-a"})
    try:
        stream.join(timeout=30)
        after = port_tx_bytes(dual)
    finally:
        engine.clear(FaultContext(dual), "tor")
    received = [sum(sample) for sample in outcome["result"].received]
    last_second = received[-1] - received[-1 - round(1 / SAMPLE_S)]
    assert before["nic1a"] > 1_000_000 and after["nic1b"] - before["nic1b"] > 1_000_000
    assert last_second > 1_000_000, f"{last_second} bytes in the stream's last second on port b"


def test_the_probe_mesh_names_the_port_a_probe_arrived_on(dual):
    """The mesh sends from each port of a dual-port NIC and to the NIC's address; the last spine
    hashes each flow to either of the destination's leaves, and the path names the NIC's link from
    the leaf its trace ended at. With every packet from leaf -b to one host dropped, the flows
    that arrive through -b lose all and name that link; those through -a lose none (a mesh naming
    the link of the port it planned, not the one the flow arrived on, fails both)."""
    from twin.probes.mesh import ProbeMesh

    victim, cut = "host-g2-h2:nic1", "leaf-g2-r1-b -- host-g2-h2"
    mesh = ProbeMesh(dual, "dual-probes", interval_ms=50, report_ms=250)
    intervals = []
    mesh.listeners.append(intervals.append)
    mesh.start()
    try:
        mesh.wait_for_paths()
        time.sleep(1.0)
        healthy = list(intervals)
        fault(dual, {"id": "cut", "kind": "silent_drop", "link": cut, "direction": "a_to_b", "loss_pct": 100})
        try:
            injected = time.monotonic()
            time.sleep(1.5)
        finally:
            engine.clear(FaultContext(dual), "cut")
    finally:
        mesh.stop()
    samples = [s for i in healthy for s in i.samples]
    assert samples and all(s.lost == 0 and None not in s.links for s in samples)
    assert {s.src.rsplit(":", 1)[1] for s in samples} == {"nic1a", "nic1b"}  # sent from both ports
    arrivals = {s.links[-1] for s in samples if s.dst == victim}
    assert arrivals == {"leaf-g2-r1-a -- host-g2-h2", cut}, arrivals  # and arriving on both
    during = [s for i in intervals if injected + 0.1 <= i.t and i.t + 0.25 <= injected + 1.5 for s in i.samples]
    through = [s for s in during if s.links[-1] == cut]
    assert through and all(s.lost == s.sent > 0 for s in through)
    assert all(s.lost == 0 for s in during if cut not in s.links)
