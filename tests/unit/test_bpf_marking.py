"""ECN marking in the compiled enqueue program (twin/lab/ebpf/queues.bpf.c), run on real packets
with BPF_PROG_TEST_RUN: no mark at or below Kmin, a chance rising linearly to Pmax just below
Kmax, every ECN-capable packet above it; packets that are not ECN-capable, or already CE, are
left alone; the queue's count and marks move as the packets do."""

from __future__ import annotations

import os
import struct

import pytest

from twin.lab.ebpf import layout
from twin.lab.ebpf.frames import ipv4_udp, loopback_queue
from twin.lab.ebpf.libbpf import run_on_packet

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not layout.OBJECT.is_file(),
                                reason="loads the BPF object (root, `make deps`)")
KMIN, KMAX, PMAX = 20_000, 60_000, 0.5
RUNS = 2000


@pytest.fixture(scope="module")
def queue():
    with loopback_queue() as (obj, state):
        struct.pack_into("<III", state, layout.OFFSET["kmin"], KMIN, KMAX, round(PMAX * layout.PROBABILITY_ONE))
        yield obj, state


def _marked_share(queue, occupancy: int, tos: int = 0x02) -> float:
    obj, state = queue
    program, packet, marked = obj.program_fd("enqueue"), ipv4_udp(tos), 0
    for _ in range(RUNS):
        struct.pack_into("<q", state, layout.OFFSET["occ"], occupancy - len(packet))  # this packet takes it there
        _verdict, out, _ns = run_on_packet(program, packet)
        marked += out[15] & 3 == 3
    return marked / RUNS


def test_no_mark_at_or_below_kmin(queue):
    assert _marked_share(queue, KMIN) == 0.0


def test_the_chance_rises_linearly_to_pmax_below_kmax(queue):
    middle = _marked_share(queue, (KMIN + KMAX) // 2)
    near_top = _marked_share(queue, KMAX - 1000)
    assert abs(middle - PMAX / 2) < 0.05, middle  # 2,000 draws: within 4 standard deviations
    assert abs(near_top - PMAX * (KMAX - 1000 - KMIN) / (KMAX - KMIN)) < 0.05, near_top


def test_every_ecn_capable_packet_above_kmax_and_nothing_else(queue):
    assert _marked_share(queue, KMAX + 1) == 1.0
    assert _marked_share(queue, KMAX + 1, tos=0x00) == 0.0  # not ECN-capable
    obj, state = queue
    before = struct.unpack_from("<Q", state, layout.OFFSET["marked"])[0]
    _marked_share(queue, KMAX + 1, tos=0x03)  # CE already: not marked again, not counted
    assert struct.unpack_from("<Q", state, layout.OFFSET["marked"])[0] == before


def test_a_mark_keeps_the_ip_header_valid(queue):
    obj, state = queue
    struct.pack_into("<q", state, layout.OFFSET["occ"], KMAX + 1)
    _verdict, out, _ns = run_on_packet(obj.program_fd("enqueue"), ipv4_udp(0x02))
    header = out[14:34]
    words = sum(struct.unpack("!10H", header))
    assert (words & 0xFFFF) + (words >> 16) == 0xFFFF  # the checksum was updated with the TOS byte
    assert header[1] == 0x03
