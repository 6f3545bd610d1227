"""PFC-like backpressure on a real lab: an incast fills a switch queue, the queue pauses exactly the
ports that feed it and nothing drops; the pauses travel hop by hop back to the senders; the same
incast on a lab with `pfc: false` drops; a PFC storm's source is named from pause counters."""

import time

import pytest

from twin.detect.pauses import PauseLocalizer
from twin.faults import engine
from twin.faults.base import FaultContext
from twin.lab.pfc import published as pfc_counters
from twin.lab.pfc.client import port_counters_now
from twin.lab.ports.counters import CounterReader
from twin.lab.traffic import tcp_incast
from twin.model.nics import fabric_nics

from .helpers import lab_copy, lab_running, marking

pytestmark = pytest.mark.integration
SECONDS = 4.0


def queue_drops(lab) -> int:
    with CounterReader(lab) as reader:
        return sum(v.get("qdisc_drops", 0) for v in reader.read(checksums=False).interfaces.values())


def incast(lab):
    """Three senders (one under the same leaf, two across the spines), four flows each, into
    host-g1-h1's NIC: enough windows in flight to overrun the queue's buffer without PFC."""
    nics = {n.label: n for n in fabric_nics(lab.fabric)}
    senders = [nics["host-g1-h2:nic1"], nics["host-g2-h1:nic1"], nics["host-g2-h2:nic1"]]
    before = queue_drops(lab)
    result = tcp_incast(lab, senders, nics["host-g1-h1:nic1"], SECONDS, flows_per_sender=4)
    return result, queue_drops(lab) - before


@pytest.fixture(scope="module")
def mini():
    with lab_running("mini", "netns") as lab:
        yield lab


# This incast dropped packets beside other work (CI: 15 once on 2026-11-26, 164 beside the docker
# tier on 2026-11-29; here 2 and 111 in the first incasts after a bring-up). Two causes, both fixed:
# the real-time controller stored its counters itself, and a write and rename on the run directory
# (ext4 here) waited up to 243 ms; and a gate change waits for the kernel's routing lock, which a
# starved normal-priority holder kept for up to 235 ms. Publications are stored by a thread
# (counters.Publisher); what arrives while a pause is late is held above the buffer and counted
# (model/buffers.py, late allowance; the test after this one).
def test_incast_pauses_its_feeders_two_hops_back_and_drops_nothing(mini):
    before = port_counters_now(mini.paths.root)
    with marking(mini, kmin=0):  # PFC alone: ECN would slow the senders before the queue pauses them
        result, drops = incast(mini)
    after = port_counters_now(mini.paths.root)
    pauses = {key: after[key].rx_pause - before[key].rx_pause for key in after}
    # (TCP may still retransmit a segment held by a pause past its tail-loss probe: not a drop)
    assert drops == 0, (drops, result)
    assert result.goodput_bps >= 0.9 * mini.fabric.rate_bps, result  # the bottleneck stays busy
    # the congested queue (leaf-g1-r1 toward host-g1-h1) paused what feeds it ...
    assert pauses[("host-g1-h2", "nic1")] > 0 and pauses[("spine-1", "lf-g1r1")] + pauses[("spine-2", "lf-g1r1")] > 0
    assert after[("leaf-g1-r1", "hs-g1h2")].tx_pause > before[("leaf-g1-r1", "hs-g1h2")].tx_pause
    # ... the spines' queues filled and paused leaf-g2-r1's uplinks (second hop), whose queues
    # paused the remote senders' NICs (third)
    assert pauses[("leaf-g2-r1", "sp-1")] + pauses[("leaf-g2-r1", "sp-2")] > 0, pauses
    assert pauses[("host-g2-h1", "nic1")] > 0 and pauses[("host-g2-h2", "nic1")] > 0, pauses
    # the queues drain once the senders stop: nobody is left paused (within the counters' 100 ms)
    deadline = time.monotonic() + 3
    while any(c.paused for c in pfc_counters.ports(pfc_counters.read(mini.state.directory)).values()):
        assert time.monotonic() < deadline, "a port stayed paused after the incast"
        time.sleep(0.05)
    document = pfc_counters.read(mini.state.directory)
    assert document["controller"]["reaction"]["events"] > 0


def test_what_arrives_while_a_pause_is_late_is_held_above_the_buffer_and_counted_not_dropped(mini):
    """The emulator's lateness is not the fabric's (model/buffers.py, late allowance): the bottleneck's
    XOFF is set 1 MB above its buffer, so its pauses come as late as a controller that waited that long
    for the kernel's routing lock; what passes the buffer is held and counted, nothing dropped."""
    from twin.lab.pfc import client as pfc_client
    from twin.model.buffers import for_port
    from twin.model.ports import Port

    port = Port("leaf-g1-r1", "hs-g1h1")
    buffer = for_port(mini.fabric, port).buffer
    before = port_counters_now(mini.paths.root)
    with marking(mini, kmin=0):
        pfc_client.tune(mini.paths.root, "test-late", port, xoff=buffer + 1_000_000, xon=buffer)
        try:
            result, drops = incast(mini)
        finally:
            pfc_client.release(mini.paths.root, "test-late")
    after = port_counters_now(mini.paths.root)
    late = {key: after[key].late - before[key].late for key in after if after[key].late > before[key].late}
    assert drops == 0, (drops, result)
    assert late.get(tuple(port), 0) > 0 and after[tuple(port)].queue_peak > buffer, (late, after[tuple(port)])


@pytest.mark.own_labs
def test_the_same_incast_on_a_lossy_lab_drops(tmp_path):
    path = lab_copy(tmp_path, "mini", "lossy")
    path.write_text(path.read_text().replace("  mtu: 9000\n", "  mtu: 9000\n  pfc: false\n"))
    with lab_running(str(path), "netns") as lossy:
        assert not lossy.fabric.pfc and pfc_counters.read(lossy.paths.root) is None  # no controller
        result, drops = incast(lossy)
    assert drops > 0 and sum(result.retransmits) > 0, (drops, result)


def test_a_pfc_storm_is_named_at_its_source_from_pause_counters(mini):
    timing, params = engine.parse({"id": "storm", "kind": "pfc_storm", "node": "host-g2-h1", "nic": "nic1",
                                   "xoff_kb": 8, "xon_kb": 2})
    localizer, verdicts = PauseLocalizer(mini.fabric), []
    engine.inject(FaultContext(mini), timing, params)
    try:
        nics = {n.label: n for n in fabric_nics(mini.fabric)}
        from twin.lab.traffic import udp_burst
        udp_burst(mini, nics["host-g1-h1:nic1"], nics["host-g2-h1:nic1"], 300, pps=3000, settle_s=0.1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not verdicts:
            verdicts = localizer.observe(time.monotonic(), pfc_counters.ports(pfc_counters.read(mini.state.directory)))
            time.sleep(0.1)
        time.sleep(0.5)
        verdicts += localizer.observe(time.monotonic(), pfc_counters.ports(pfc_counters.read(mini.state.directory)))
    finally:
        report = engine.clear(FaultContext(mini), "storm")["record"]["report"]
    assert [(v.node, v.kind) for v in verdicts] == [("host-g2-h1", "pfc_storm")]
    assert report["pauses"] == 1 and report["most_held"] >= 2  # the storm spread beyond its port
