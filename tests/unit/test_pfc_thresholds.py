"""XOFF, XON and buffers from the line rate (model/buffers.py), and the lab file's overrides."""

from pathlib import Path

import pytest

from twin.lab import runtime
from twin.lab.files import open_lab
from twin.model import buffers as thresholds
from twin.model.build import build_fabric
from twin.model.ports import Port, feeders, ports
from twin.spec.labfile import load_lab


def lab(tmp_path: Path, links: str):
    path = tmp_path / "q.yaml"
    path.write_text("name: q\nfabric: {tiers: 2, groups: 2, rails: 1, hosts_per_group: 2, spines_per_plane: 2}\n"
                    f"links: {links}\n")
    return build_fabric(load_lab(path, runtime.names()))


def test_xoff_is_four_ms_of_line_rate_or_four_frames():
    assert thresholds.default_xoff(200_000_000, 9000) == 100_000  # 4 ms at 25 MB/s
    assert thresholds.default_xoff(10_000_000, 9000) == 4 * 9014  # 4 ms is 5 KB: four frames win


def test_xon_is_half_of_xoff_and_two_frames_below_it():
    assert thresholds.default_xon(100_000, 9000) == 50_000
    assert thresholds.default_xon(4 * 9014, 9000) == 2 * 9014  # half would be closer than two frames


def test_headroom_grows_with_the_senders_that_feed_a_queue():
    one = thresholds.headroom(200_000_000, 9000, 1)
    assert one == 250_000 + 2 * 9014  # REACTION_MS of line rate, and two frames on their way
    assert thresholds.headroom(200_000_000, 9000, 7) == 7 * one


def test_every_switch_port_gets_xoff_plus_headroom_for_its_feeders():
    _lab, fabric = open_lab("rail4")
    for port in ports(fabric):
        if not fabric.nodes[port.node].is_switch:
            assert thresholds.queue_limit(fabric, port) == thresholds.HOST_QUEUE_BYTES
            continue
        limits = thresholds.for_port(fabric, port)
        senders = len(feeders(fabric, port.node, port.ifname))
        assert limits.buffer == limits.xoff + thresholds.headroom(fabric.rate_bps, fabric.mtu, senders)
        assert limits.xon < limits.xoff < limits.buffer
    # a superspine port toward a spine is fed by the 7 other spines, a leaf's port up by its 2 hosts
    assert thresholds.for_port(fabric, Port("superspine-1", "sp-r1s1")).headroom == \
        thresholds.headroom(fabric.rate_bps, fabric.mtu, 7)
    assert thresholds.for_port(fabric, Port("leaf-g1-r1", "sp-r1s1")).headroom == \
        thresholds.headroom(fabric.rate_bps, fabric.mtu, 2)


def test_lab_settings_win_over_the_defaults(tmp_path):
    fabric = lab(tmp_path, "{rate: 100mbit, pfc_xoff: 60KB, pfc_xon: 20KB, buffer: 1MB, pfc_watchdog_ms: 200}")
    limits = thresholds.for_port(fabric, Port("leaf-g1-r1", "hs-g1h1"))
    assert (limits.xoff, limits.xon, limits.buffer) == (60_000, 20_000, 1_000_000)
    assert fabric.pfc and fabric.pfc_watchdog_ms == 200


@pytest.mark.parametrize("mtu", [1500, 9000])
def test_a_lossy_lab_keeps_the_same_buffers(tmp_path, mtu):
    lossless = lab(tmp_path, f"{{mtu: {mtu}}}")
    lossy = lab(tmp_path, f"{{mtu: {mtu}, pfc: false}}")
    assert not lossy.pfc
    for port in ports(lossy):
        if not lossy.nodes[port.node].is_switch:
            assert thresholds.queue_limit(lossy, port) == thresholds.queue_limit(lossless, port)
            continue
        buffer = thresholds.for_port(lossy, port).buffer
        assert buffer == thresholds.for_port(lossless, port).buffer
        assert thresholds.queue_limit(lossy, port) == buffer  # a lossy queue drops at its buffer
        # a lossless one holds what arrives while the emulator's pause is late, above its buffer
        assert thresholds.queue_limit(lossless, port) == buffer + thresholds.late_allowance(lossless, port)
        assert thresholds.late_allowance(lossless, port) >= thresholds.line_bytes(lossless.rate_bps, 250)


def test_the_late_allowance_is_capped_for_fast_wide_ports(tmp_path):
    fast = lab(tmp_path, "{rate: 10gbit}")
    assert max(thresholds.late_allowance(fast, port) for port in ports(fast)
               if fast.nodes[port.node].is_switch) == thresholds.LATE_CAP_BYTES
