"""Every fault kind on a real lab: its effect is measured with real traffic, and clearing it
restores the exact prior state (nft, qdiscs, links, routes, FRR config and FIB)."""

import json
import subprocess
import time

import pytest

from twin.detect import config_audit
from twin.errors import TwinError
from twin.faults import engine
from twin.faults.applier import FaultApplier
from twin.faults.base import FaultContext
from twin.lab import kernel_state as snapshot
from twin.lab.kernel.shaping import shaped_rate_bps
from twin.lab.pfc import client as pfc_client
from twin.lab.pfc import published as pfc_counters
from twin.lab.ports import phy
from twin.lab.ports.counters import CounterReader
from twin.lab.reach import unreachable_pairs
from twin.lab.routing import converge
from twin.lab.routing.converge import fib_next_hops
from twin.lab.status import lab_status, switch_status
from twin.lab.traffic import udp_burst
from twin.model.buffers import for_port
from twin.model.ecmp import expected_next_hops
from twin.model.fabric import link_key
from twin.model.nics import fabric_nics
from twin.model.ports import Port
from twin.model.targets import resolve_link
from twin.procs import alive
from twin.progress import NullProgress

from .helpers import lab_running, losses_elsewhere, marking, netns_tier_only, pfc_standing, wait_for
from .test_pfc import incast

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lab(runtime, lab_ref):
    with lab_running(lab_ref("mini"), runtime) as running:
        yield running


def faults_on(lab):
    return FaultContext(lab, seed=7)


def nic(ctx, label):
    return next(n for n in fabric_nics(ctx.fabric) if n.label == label)


def converged(ctx):
    deadline = time.monotonic() + 60
    converge.wait_sessions(ctx, NullProgress(), deadline, heard=True)
    converge.wait_routing(ctx, NullProgress(), deadline)
    converge.wait_bfd(ctx, NullProgress(), deadline)
    converge.wait_reachable(ctx, NullProgress(), deadline)


class Applied:
    """Snapshot, inject, yield, clear, re-converge, compare with the snapshot."""

    def __init__(self, ctx, **entry):
        self.ctx, self.entry = ctx, entry

    def __enter__(self):
        self.before = snapshot.take(self.ctx)
        timing, params = engine.parse(self.entry)
        return engine.inject(faults_on(self.ctx), timing, params)

    def __exit__(self, *exc):
        self.cleared = engine.clear(faults_on(self.ctx), self.entry["id"])
        converged(self.ctx)
        after = snapshot.take(self.ctx)
        assert snapshot.differences(self.before, after) == []
        assert self.ctx.state.faults == []


def _phy_counts(lab, node, ifname):
    return phy.counts(lab)[Port(node, ifname)]


def test_silent_drop_loses_the_stated_share_and_bfd_stays_up(lab):
    before = _phy_counts(lab, "host-g1-h1", "nic1")
    elsewhere = losses_elsewhere(lab, ["host-g1-h1"])
    with Applied(lab, id="lossy", kind="silent_drop", link="leaf-g1-r1 -- host-g1-h1",
                 direction="a_to_b", loss_pct=5):
        burst = udp_burst(lab, nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1"), 20000)
        after = _phy_counts(lab, "host-g1-h1", "nic1")
        elsewhere = losses_elsewhere(lab, ["host-g1-h1"], since=elsewhere)
        assert 3.5 <= burst.loss_pct <= 6.5, burst
        # The fault's counter is all the burst lost (CI once lost 140 more, cause not found: the
        # message says where else the kernel counted a loss meanwhile)
        assert abs(after["dropped"] - before["dropped"] - (burst.sent - burst.received)) <= 5, \
            (after, burst, elsewhere)
        assert after["crc_errors"] == before["crc_errors"]  # a silent drop counts nothing a port shows
        statuses = lab_status(lab)
        assert all(set(s.bfd.values()) == {"up"} for s in statuses)


def test_a_silent_drop_and_bit_errors_leave_nothing_a_node_lists(lab):
    """What a trainee could list on every node (nft ruleset, qdiscs, classes, filters, links,
    routes, rules, sysctls, FRR's config) is the same with both faults on as on the healthy lab;
    only the ports' physical layer differs, and only at the receiving ports."""
    before = snapshot.take(lab)
    entries = [{"id": "optic", "kind": "silent_drop", "link": "leaf-g1-r1 -- spine-1", "loss_pct": 5},
               {"id": "cable", "kind": "bitflip", "link": "leaf-g2-r1 -- spine-2", "direction": "a_to_b",
                "rate_pct": 5}]
    try:
        for entry in entries:
            engine.inject(faults_on(lab), *engine.parse(entry))
        during = snapshot.take(lab)
    finally:
        for entry in entries:
            engine.clear(faults_on(lab), entry["id"])
    converged(lab)
    assert snapshot.differences(before, snapshot.take(lab)) == []
    listed = snapshot.differences({n: {k: v for k, v in e.items() if k != "phy"} for n, e in before.items()},
                                  {n: {k: v for k, v in e.items() if k != "phy"} for n, e in during.items()})
    assert listed == []
    hardware = {(node, ifname) for node, entry in during.items() for ifname in entry["phy"]}
    optic = resolve_link(lab.fabric, "leaf-g1-r1 -- spine-1")[0]
    cable = resolve_link(lab.fabric, "leaf-g2-r1 -- spine-2")[0]
    assert hardware == {(end.node, end.ifname) for end in (optic.a, optic.b, cable.endpoint("spine-2"))}


def test_silent_drop_flows_pct_hits_a_fixed_subset_of_flows(lab):
    with Applied(lab, id="flows", kind="silent_drop", link="leaf-g1-r1 -- host-g1-h1",
                 direction="a_to_b", loss_pct=100, flows_pct=50):
        bursts = [udp_burst(lab, nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1"), 2000,
                            source_ports=1, settle_s=0.3) for _ in range(12)]
        # each burst is one flow (one source port): it is either wholly lost or untouched
        assert {round(b.loss_pct) for b in bursts} <= {0, 100}
        assert any(b.loss_pct == 100 for b in bursts) and any(b.loss_pct == 0 for b in bursts)


def test_blackhole_loses_exactly_the_targeted_traffic(lab):
    with Applied(lab, id="hole", kind="blackhole", node="leaf-g2-r1", host="host-g2-h1"):
        to_target = udp_burst(lab, nic(lab, "host-g1-h1:nic1"), nic(lab, "host-g2-h1:nic1"), 2000)
        to_neighbour = udp_burst(lab, nic(lab, "host-g1-h1:nic1"), nic(lab, "host-g2-h2:nic1"), 2000)
        assert (to_target.received, to_neighbour.loss_pct) == (0, 0.0)
        failed = unreachable_pairs(lab)
        assert failed and all("host-g2-h1:nic1" in pair for pair in failed)
        # still advertised: the spines keep their route toward the black-holed host
        assert fib_next_hops(lab, "spine-1")[lab.fabric.links_of("host-g2-h1")[0].network] == 1


def test_link_down_withdraws_ecmp_members_and_reachability_survives(lab):
    with Applied(lab, id="cut", kind="link_down", link="leaf-g1-r1 -- spine-1"):
        remote = [link.network for link in lab.fabric.links if link.kind == "host" and link.a.node == "leaf-g2-r1"]
        wait_for(lambda: all(fib_next_hops(lab, "leaf-g1-r1").get(p) == 1 for p in remote),
                 what="leaf-g1-r1 to drop the spine-1 next hop")
        assert unreachable_pairs(lab) == []


def test_the_fault_applier_process_applies_refuses_and_clears_then_ends(lab):
    """A run's faults go through a process of their own (twin/faults/applier.py)."""
    before = snapshot.take(lab)
    applier = FaultApplier(lab, seed=7)
    try:
        timing, params = engine.parse({"id": "cut", "kind": "link_down", "link": "leaf-g1-r1 -- spine-1"})
        entry = applier.inject(timing, params)
        assert entry["targets"] == ["leaf-g1-r1 -- spine-1"]
        assert [f["id"] for f in lab.state.faults] == ["cut"]  # the run's state took it in
        with lab.netlink("leaf-g1-r1") as ipr:
            assert not ipr.get_links(ifname="sp-1")[0]["flags"] & 1  # IFF_UP cleared, by that process
        with pytest.raises(TwinError, match="already active"):
            applier.inject(timing, params)
        applier.clear("cut")
        assert lab.state.faults == []
    finally:
        applier.close()
        lab.state.refresh()
        engine.clear_all(faults_on(lab))  # what a failed assertion left: the next tests share the lab
    assert not alive(applier.pid)
    assert not [r for r in lab.state.resources if r.name.startswith("faults/applier")]
    converged(lab)
    assert snapshot.differences(before, snapshot.take(lab)) == []


def test_the_fault_applier_keeps_the_schedule_and_stops_when_told(lab):
    timing, params = engine.parse({"id": "cut", "kind": "link_down", "link": "leaf-g1-r1 -- spine-1"})
    bad_timing, bad_params = engine.parse({"id": "bad", "kind": "link_down", "link": "leaf-g1-r1 -- spine-1"})
    apply = {"op": "apply", "timing": timing.model_dump(), "params": params.model_dump()}
    overlapping = {"op": "apply", "timing": bad_timing.model_dump(), "params": bad_params.model_dump()}
    applier = FaultApplier(lab, seed=7)
    try:
        applier.ready()
        t0 = time.monotonic()
        applier.schedule(t0, [{**apply, "at_s": 0.3}, {**overlapping, "at_s": 0.4},
                              {"op": "clear", "id": "bad", "at_s": 0.5}, {"op": "clear", "id": "cut", "at_s": 0.8},
                              {**apply, "at_s": 1.0}, {"op": "clear", "id": "cut", "at_s": 60}])
        reports = [applier.done(10) for _ in range(5)]
        assert [r["step"] for r in reports] == [0, 1, 2, 3, 4]
        scheduled = [0.3, 0.4, 0.5, 0.8, 1.0]
        for report, at_s in zip(reports, scheduled):  # never early; late only by the steps before it
            if not report.get("skipped"):
                assert at_s <= report["actual_s"] < at_s + 10, report
        assert "overlaps active fault 'cut'" in reports[1]["error"]
        assert reports[2] == {"step": 2, "skipped": True}  # the clear of a fault that never applied
        assert [f["id"] for f in lab.state.faults] == ["cut"]
        started = time.monotonic()
        assert applier.stop() == []  # the clear at 60 s is not taken
        assert time.monotonic() - started < 5
        assert [f["id"] for f in lab.state.faults] == ["cut"]
        applier.clear("cut")
    finally:
        applier.close()
        lab.state.refresh()
        engine.clear_all(faults_on(lab))  # what a failed assertion left: the next tests share the lab
    converged(lab)


def test_a_runs_clock_starts_only_once_its_fault_applier_is_ready(lab, runtime, tmp_path, monkeypatch):
    """The applier keeps the timeline; under CI's load it took more than 3 s to start, and a fault
    due at 3 s was applied 0.62 s late. Here it is made to start 3 s late: the fault at 1 s is
    still applied on schedule, because the run's clock waits for it."""
    netns_tier_only(runtime, "the run's clock does not depend on the runtime")
    from twin.faults import applier as applier_module
    from twin.run import runner
    from twin.run.plan import load_scenario

    real = applier_module.python_module
    monkeypatch.setattr(applier_module, "python_module",
                        lambda *args: ["sh", "-c", 'sleep 3; exec "$@"', "sh", *real(*args)])
    scenario = tmp_path / "late-applier.yaml"
    scenario.write_text(f"name: late-applier\nlab: {lab.name}\nduration_s: 3\nfaults:\n"
                        "  - {id: thin, kind: silent_drop, link: leaf-g1-r1 -- spine-1, loss_pct: 1, "
                        "at_s: 1, duration_s: 1}\n")
    try:
        folder = runner.run(load_scenario(scenario), tmp_path / "results", keep=True)
    finally:
        lab.state.refresh()
        engine.clear_all(faults_on(lab))
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    (applied,) = [e for e in events if e["kind"] == "fault" and e["op"] == "applied"]
    assert abs(applied["actual_s"] - 1.0) <= 0.05, applied


def test_a_fault_applier_that_does_not_answer_in_time_is_ended_and_another_clears(lab, monkeypatch):
    """A step that never returns must not hold the run's clean-up: past the time limit the process
    is ended by its pid, the call fails with the reason, and a new applier takes over."""
    from twin.faults import applier as applier_module
    timing, params = engine.parse({"id": "cut", "kind": "link_down", "link": "leaf-g1-r1 -- spine-1"})
    slow = FaultApplier(lab, seed=7)
    try:
        slow.ready()
        monkeypatch.setattr(applier_module, "STEP_LIMIT_S", 0.0)  # no step answers within 0 s
        with pytest.raises(TwinError, match="did not answer in 0 s and was ended"):
            slow.inject(timing, params)
        assert not alive(slow.pid)
        monkeypatch.setattr(applier_module, "STEP_LIMIT_S", 300.0)
        lab.state.refresh()
        fresh = FaultApplier(lab, seed=7)
        try:
            for fault in list(lab.state.faults):  # whatever the ended one had recorded
                fresh.clear(fault["id"])
        finally:
            fresh.close()
    finally:
        slow.close()
        lab.state.refresh()
        engine.clear_all(faults_on(lab))
    assert not [r for r in lab.state.resources if r.name.startswith("faults/applier")]
    converged(lab)


def test_bgp_down_shuts_one_session_and_links_stay_up(lab):
    with Applied(lab, id="misconf", kind="bgp_down", link="leaf-g1-r1 -- spine-1") as entry:
        wait_for(lambda: {s.name: s for s in lab_status(lab)}["leaf-g1-r1"]
                 .bgp["spine-1"] != "Established", what="the session to go down")
        with lab.netlink("leaf-g1-r1") as ipr:
            assert ipr.get_links(ifname="sp-1")[0]["flags"] & 1  # IFF_UP: the link itself is fine
        assert entry["record"]["peer"] == "10.0.0.0"
        assert unreachable_pairs(lab) == []
        assert audited(lab) == {("bgp_down", link_key("leaf-g1-r1 -- spine-1"))}


def test_slow_node_runs_the_nic_at_the_stated_share(lab):
    with Applied(lab, id="slow", kind="slow_node", node="host-g1-h1", rate_pct=25):
        for node, ifname in (("host-g1-h1", "nic1"), ("leaf-g1-r1", "hs-g1h1")):
            with lab.netlink(node) as ipr:
                assert shaped_rate_bps(ipr, ipr.link_lookup(ifname=ifname)[0]) == lab.fabric.rate_bps // 4


def test_switch_down_and_back(lab):
    with Applied(lab, id="dead", kind="switch_down", node="spine-1"):
        status = {s.name: s for s in lab_status(lab)}
        routing = {daemon: up for daemon, up in status["spine-1"].daemons.items() if daemon != "lldpd"}
        assert routing and not any(routing.values())  # FRR stopped; its lldpd stays, every port down
        wait_for(lambda: unreachable_pairs(lab, timeout_s=1) == [],
                 what="traffic to move to spine-2")


def test_pfc_pause_lets_bulk_tcp_resume_at_line_rate(lab):
    """TCP through a port paused 300 ms of every second is back at line rate within every second:
    a pause must not leave the port owing tokens (pausing HTB's class rate once charged it 9 s
    for the one jumbo frame let through, and this transfer stalled for good). Rates as the receiver
    counts them (iperf3 -R: the client at the paused end receives): a sender counts what its socket
    took, and a window that grew on a lossless fabric keeps taking while the port is paused."""
    src, dst = nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1")
    with Applied(lab, id="pulse", kind="pfc_pause", link="leaf-g1-r1 -- host-g1-h1", direction="a_to_b",
                 pause_ms=300, period_ms=1000) as entry:
        wait_for(lambda: _pfc(lab, "leaf-g1-r1", "hs-g1h1").rx_pause >= 1, what="the first pause")
        server = subprocess.Popen(["ip", "netns", "exec", lab.runtime.resource_name(src.host),
                                   "iperf3", "-s", "-1", "-B", src.address],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            result = lab.runtime.exec(dst.host, ["iperf3", "-c", src.address, "-B", dst.address, "-R", "-t", "5",
                                                 "-i", "0.1", "-J"], timeout=30)
        finally:
            server.kill()
            server.wait()
        assert result.rc == 0, result.stderr
    pauses = entry["record"]["report"]["pauses"]
    rates = [i["sum"]["bits_per_second"] for i in json.loads(result.stdout)["intervals"]]
    # really paused: a 300 ms pause holds two whole 100 ms intervals wherever it starts (a 250 ms
    # interval lies wholly inside it only when the pause starts within 50 ms before one)
    assert pauses >= 5 and min(rates) < 0.1 * lab.fabric.rate_bps
    # every 1.3 s (a period, wherever it starts) has a tenth of a second near line rate
    windows = [rates[i:i + 13] for i in range(len(rates) - 12)]
    assert all(max(w) >= 0.6 * lab.fabric.rate_bps for w in windows), [round(r / 1e6) for r in rates]


def test_pfc_pause_holds_traffic_without_a_drop(lab):
    with Applied(lab, id="pause", kind="pfc_pause", link="leaf-g1-r1 -- host-g1-h1",
                 direction="a_to_b", pause_ms=1500) as entry:
        wait_for(lambda: _pfc(lab, "leaf-g1-r1", "hs-g1h1").paused, what="the direction to be paused")
        burst = udp_burst(lab, nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1"),
                          1000, pps=2000, settle_s=3.0)
        assert burst.received == burst.sent, burst  # held, not dropped
        assert burst.max_delay_s >= 0.5, burst  # ... and held for a while
        time.sleep(0.2)
    assert entry["record"]["report"]["pauses"] == 1


def _direct_packets(lab, node: str, ifname: str) -> int:
    """What the port's HTB root sent from its direct queue (a switch's control plane)."""
    shown = json.loads(lab.runtime.exec(node, ["tc", "-j", "qdisc", "show", "dev", ifname]).stdout)
    return next(q["options"]["direct_packets_stat"] for q in shown if q["kind"] == "htb")


def test_a_paused_switch_port_still_sends_its_control_plane(lab, runtime):
    """PFC pauses the data, not the port: while a leaf's port toward a spine is held for 2.5 s (almost
    three times BFD's detection time) with data queued behind it, the leaf's BFD sessions and
    BGP stay up, and its BGP and BFD packets leave that port through the HTB root's direct queue,
    which the held gate does not hold (model/queue_tree.py). Sent to the data class they waited
    behind the queued data (a closed gate lets a frame through about every second): the session
    to that spine went down, BFD then BGP (checked with the tree's control filters dropped)."""
    netns_tier_only(runtime, "a port's queue tree is the kernel's, whatever runs the node")
    link = next(link for link in lab.fabric.links_of("leaf-g1-r1") if "spine-1" in link.name)
    port = link.endpoint("leaf-g1-r1").ifname
    expected = expected_next_hops(lab.fabric)
    source, spine = nic(lab, "host-g1-h1:nic1"), str(lab.fabric.nodes["spine-1"].loopback)
    with Applied(lab, id="held", kind="pfc_pause", link=link.name, direction="a_to_b" if link.a.node ==
                 "leaf-g1-r1" else "b_to_a", pause_ms=10_000):  # cleared when the checks end
        wait_for(lambda: _pfc(lab, "leaf-g1-r1", port).paused, what="the leaf's port to be paused")
        # data for the spine itself, whose one path from this leaf is the held port: it queues there
        lab.runtime.exec(source.host, ["ping", "-q", "-i", "0.01", "-c", "50", "-s", "8000", "-W", "0.01",
                                       "-I", str(source.address), spine], timeout=10)
        sent_before, held_since = _direct_packets(lab, "leaf-g1-r1", port), time.monotonic()
        while time.monotonic() - held_since < 2.5:
            status = switch_status(lab, "leaf-g1-r1", expected)
            assert status.bfd and all(state == "up" for state in status.bfd.values()), status.bfd
            assert all(state == "Established" for state in status.bgp.values()), status.bgp
            time.sleep(0.3)
        assert _pfc(lab, "leaf-g1-r1", port).paused, "the pause ended before the checks did"
        assert _direct_packets(lab, "leaf-g1-r1", port) >= sent_before + 3  # BFD every 300 ms, at least


def test_flap_cycles_then_leaves_the_link_up(lab):
    """The apply returns once the link is down (its agent's start, a process of its own, is not
    part of the fault's onset, from which detectors are timed), and the link is up at the end."""
    port = next(link for link in lab.fabric.links_of("leaf-g1-r1") if "spine-1" in link.name).endpoint("leaf-g1-r1")
    with Applied(lab, id="flappy", kind="flap", link="leaf-g1-r1 -- spine-1", period_s=2, count=2):
        shown = json.loads(lab.runtime.exec("leaf-g1-r1", ["ip", "-j", "link", "show", port.ifname]).stdout)
        assert "LOWER_UP" not in shown[0]["flags"], "the flap's apply returned before its first down"
        report = lab.state.directory / "faults" / "flappy.json"
        wait_for(lambda: report.is_file() and json.loads(report.read_text())["cycles"] == 2,
                 what="two flap cycles")


def test_overlapping_faults_are_refused_and_nothing_changes(lab):
    before = snapshot.take(lab)
    with Applied(lab, id="first", kind="link_down", link="leaf-g2-r1 -- spine-2"):
        timing, params = engine.parse({"id": "second", "kind": "silent_drop", "link": "spine-2 -- leaf-g2-r1",
                                       "loss_pct": 1})
        with pytest.raises(Exception, match="overlaps active fault 'first'"):
            engine.inject(faults_on(lab), timing, params)
    assert snapshot.differences(before, snapshot.take(lab)) == []


def test_bitflip_damaged_frames_fail_the_ports_frame_check_and_are_counted_there(lab):
    from twin.lab.kernel.offload import snmp
    host_path = lab.netns("host-g1-h1")
    checksum_before = snmp(host_path)["Udp.InCsumErrors"]
    with CounterReader(lab) as reader:
        before = reader.read(checksums=False, qdiscs=False).interfaces[("host-g1-h1", "nic1")]
        with Applied(lab, id="flips", kind="bitflip", link="leaf-g1-r1 -- host-g1-h1", direction="a_to_b",
                     rate_pct=20):
            burst = udp_burst(lab, nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1"), 5000)
            after = reader.read(checksums=False, qdiscs=False).interfaces[("host-g1-h1", "nic1")]
    assert burst.damaged == 0, "a corrupted datagram reached the application"
    assert 15 <= burst.loss_pct <= 25, burst  # the damaged ones were discarded by the port...
    crc = after["rx_crc_errors"] - before["rx_crc_errors"]
    assert abs(crc - (burst.sent - burst.received)) <= 5, (crc, burst)  # ...and counted as it counts them
    assert after["rx_errors"] - before["rx_errors"] == crc
    assert snmp(host_path)["Udp.InCsumErrors"] == checksum_before  # never reached the host's stack


def test_bitflip_min_size_spares_small_packets(lab):
    with Applied(lab, id="bigflips", kind="bitflip", link="leaf-g1-r1 -- host-g1-h1", direction="a_to_b",
                 rate_pct=100, min_size=1000):
        small = udp_burst(lab, nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1"), 1000)
    assert (small.loss_pct, small.damaged) == (0.0, 0)


def _pfc(lab, node, ifname):
    """A port's PFC counters, as the lab's controller publishes them."""
    return pfc_counters.ports(pfc_counters.read(lab.state.directory))[(node, ifname)]


def _paused(lab) -> set[str]:
    return {f"{n} {i}" for (n, i), c in pfc_counters.ports(pfc_counters.read(lab.state.directory)).items()
            if c.paused}


def test_pfc_storm_spreads_upstream_and_holds_innocent_traffic(lab):
    import threading
    with Applied(lab, id="storm", kind="pfc_storm", node="host-g1-h1", nic="nic1", propagate=True,
                 xoff_kb=4, xon_kb=1):
        wait_for(lambda: "leaf-g1-r1 hs-g1h1" in _paused(lab), what="the storming port to be paused")
        # traffic into the paused port fills its queue past XOFF ...
        udp_burst(lab, nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1"), 400, pps=2000,
                  settle_s=0.1)
        # ... so the spines' ports toward leaf-g1-r1 are paused too
        wait_for(lambda: {"spine-1 lf-g1r1", "spine-2 lf-g1r1"} <= _paused(lab), what="the storm to reach the spines")
        innocent = {}
        sender = threading.Thread(target=lambda: innocent.update(burst=udp_burst(
            lab, nic(lab, "host-g2-h2:nic1"), nic(lab, "host-g1-h2:nic1"), 200, pps=1000, settle_s=8)))
        sender.start()
        time.sleep(2)  # the innocent host's traffic is stuck behind the spread pause
    sender.join()
    burst = innocent["burst"]
    assert burst.received == burst.sent, burst  # lossless: held, then delivered once the storm ended
    assert burst.max_delay_s >= 1.0, burst


def test_pfc_storm_watchdog_drops_and_unblocks(lab):
    with Applied(lab, id="wd", kind="pfc_storm", node="host-g1-h1", nic="nic1", propagate=True,
                 xoff_kb=4, xon_kb=1, watchdog_ms=1000):
        udp_burst(lab, nic(lab, "host-g2-h1:nic1"), nic(lab, "host-g1-h1:nic1"), 400, pps=2000,
                  settle_s=0.1)
        wait_for(lambda: _pfc(lab, "leaf-g1-r1", "hs-g1h1").watchdog >= 1, what="the watchdog")
        wait_for(lambda: _paused(lab) == set(), what="the pauses to be released",
                 detail=lambda: pfc_standing(lab))
        innocent = udp_burst(lab, nic(lab, "host-g2-h2:nic1"), nic(lab, "host-g1-h2:nic1"), 500)
        victim = udp_burst(lab, nic(lab, "host-g2-h2:nic1"), nic(lab, "host-g1-h1:nic1"), 500)
    assert innocent.loss_pct == 0 and innocent.max_delay_s < 0.1, innocent
    assert victim.received == 0, victim  # dropped toward the broken NIC, as switch watchdogs do


# --- misconfiguration (issue 31) -----------------------------------------------------------------

def audited(lab):
    """What config-audit finds on the lab now: (kind, link or node)."""
    return {(f.kind, f.link or f.node) for f in config_audit.sweep(lab)}


def test_config_audit_finds_nothing_on_a_lab_that_matches_its_intent(lab):
    assert audited(lab) == set()

def ping(lab, node, address, size, count=2):
    """True when `count` pings of `size` bytes, not fragmented, all come back."""
    argv = ["ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "1", "-M", "do", "-s", str(size), address]
    return lab.runtime.exec(node, argv).rc == 0


def test_mtu_mismatch_kills_big_frames_on_the_pushed_port_and_nothing_else(lab):
    spine_end = str(lab.fabric.find_link("leaf-g1-r1", "spine-1").endpoint("spine-1").address.ip)
    assert ping(lab, "leaf-g1-r1", spine_end, 4000)
    with Applied(lab, id="push", kind="mtu_mismatch", link="leaf-g1-r1 -- spine-1", node="spine-1", mtu=1500) as entry:
        assert entry["record"]["prior_mtu"] == lab.fabric.mtu
        assert not ping(lab, "leaf-g1-r1", spine_end, 4000)  # dropped on arrival at the 1500-byte port
        assert ping(lab, "leaf-g1-r1", spine_end, 1000)
        assert {s.name: s for s in lab_status(lab)}["leaf-g1-r1"].bgp["spine-1"] == "Established"
        assert audited(lab) == {("mtu_mismatch", link_key("leaf-g1-r1 -- spine-1"))}
    assert ping(lab, "leaf-g1-r1", spine_end, 4000)


def test_ecmp_width_shrinks_the_switch_groups_to_max_paths(lab):
    assert max(fib_next_hops(lab, "leaf-g1-r1").values()) == 2
    with Applied(lab, id="narrow", kind="ecmp_width", node="leaf-g1-r1", max_paths=1):
        wait_for(lambda: max(fib_next_hops(lab, "leaf-g1-r1").values()) == 1,
                 what="the leaf's groups to shrink to one next hop")
        assert unreachable_pairs(lab) == []
        assert audited(lab) == {("ecmp_width", "leaf-g1-r1")}


def test_peer_mismatch_keeps_the_session_from_establishing_while_the_link_is_up(lab):
    with Applied(lab, id="typo", kind="peer_mismatch", link="leaf-g1-r1 -- spine-1") as entry:
        wait_for(lambda: {s.name: s for s in lab_status(lab)}["spine-1"].bgp["leaf-g1-r1"] != "Established",
                 what="the session to go down")
        assert entry["record"]["asn"] not in {node.asn for node in lab.fabric.switches}
        with lab.netlink("leaf-g1-r1") as ipr:
            assert ipr.get_links(ifname="sp-1")[0]["flags"] & 1
        time.sleep(3)  # connect retries every second: it stays down
        assert {s.name: s for s in lab_status(lab)}["spine-1"].bgp["leaf-g1-r1"] != "Established"
        assert unreachable_pairs(lab) == []
        assert audited(lab) == {("peer_mismatch", link_key("leaf-g1-r1 -- spine-1"))}


def test_route_filter_at_a_leaf_hides_its_host_from_the_other_leaf(lab):
    prefix = next(link.network for link in lab.fabric.links_of("host-g1-h1"))
    assert prefix in fib_next_hops(lab, "leaf-g2-r1")
    with Applied(lab, id="bad-map", kind="route_filter", node="leaf-g1-r1", host="host-g1-h1"):
        wait_for(lambda: prefix not in fib_next_hops(lab, "leaf-g2-r1"),
                 what="the other leaf to lose the host's route")
        assert {s.name: s for s in lab_status(lab)}["leaf-g1-r1"].bgp["spine-1"] == "Established"
        assert ("host-g2-h1:nic1", "host-g1-h1:nic1") in unreachable_pairs(lab)
        assert audited(lab) == {("route_filter", "leaf-g1-r1")}


def test_hash_policy_l3_sends_every_port_of_a_pair_one_way(lab):
    """The kernel's own lookup at the leaf, for one NIC pair over 32 source ports: spread over both
    spines on the lab's l4 hash, one spine on l3."""
    src, dst = nic(lab, "host-g1-h1:nic1"), nic(lab, "host-g2-h1:nic1")
    iif = lab.fabric.find_link("leaf-g1-r1", "host-g1-h1").endpoint("leaf-g1-r1").ifname

    def next_hops():
        hops = set()
        for sport in range(40000, 40032):
            argv = ["ip", "-j", "route", "get", dst.address, "from", src.address, "iif", iif,
                    "ipproto", "17", "sport", str(sport), "dport", "47000"]  # 17: UDP (no /etc/protocols in the images)
            hops.add(json.loads(lab.runtime.exec("leaf-g1-r1", argv).stdout)[0].get("gateway"))
        return hops

    assert len(next_hops()) == 2
    with Applied(lab, id="polar", kind="hash_policy", node="leaf-g1-r1", policy="l3"):
        assert len(next_hops()) == 1
        assert audited(lab) == {("hash_policy", "leaf-g1-r1")}


def test_ecn_thresholds_turn_one_switch_marking_off_and_back(lab):
    before = pfc_client.marking(lab.paths.root)
    spine_ports = [key for key in before if key[0] == "spine-1"]
    assert spine_ports and all(before[key][0] > 0 for key in spine_ports)
    with Applied(lab, id="no-marks", kind="ecn_thresholds", node="spine-1", kmin_kb=0):
        now = pfc_client.marking(lab.paths.root)
        assert all(now[key][:2] == (0, 0) for key in spine_ports)
        assert {k: v for k, v in now.items() if k[0] != "spine-1"} == {k: v for k, v in before.items()
                                                                       if k[0] != "spine-1"}
        assert audited(lab) == {("ecn_thresholds", "spine-1")}
    assert pfc_client.marking(lab.paths.root) == before


def tbf_limit(lab, node: str, ifname: str) -> int:
    """The byte limit of the port's queue (its gate, a TBF under the data class)."""
    with lab.netlink(node) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        tbf = next(q for q in ipr.get_qdiscs(index=index) if q.get_attr("TCA_KIND") == "tbf")
        return tbf.get_attr("TCA_OPTIONS").get_attr("TCA_TBF_PARMS")["limit"]


def test_lossy_class_leaves_one_queue_unpaused_so_an_incast_drops_there_and_nowhere_else(lab):
    """The leaf's port toward the incast's receiver leaves the lossless class: that queue stops
    pausing its senders, fills to its buffer (not the late allowance a lossless queue holds above
    it) and drops, while the lab as shipped drops nothing (test_pfc); config-audit names the link;
    clearing gives the queue its XOFF and its limit back."""
    before = pfc_client.thresholds(lab.paths.root)
    port = ("leaf-g1-r1", lab.fabric.find_link("leaf-g1-r1", "host-g1-h1").endpoint("leaf-g1-r1").ifname)
    assert before[port][0] > 0 and all(xoff > 0 for xoff, _xon in before.values())
    limit = tbf_limit(lab, *port)
    buffer = for_port(lab.fabric, Port(*port)).buffer
    assert limit > buffer
    with Applied(lab, id="lossy", kind="lossy_class", link="leaf-g1-r1 -- host-g1-h1", node="leaf-g1-r1"):
        assert tbf_limit(lab, *port) == buffer
        now = pfc_client.thresholds(lab.paths.root)
        assert now[port] == (0, before[port][1]) and {k: v for k, v in now.items() if k != port} == \
            {k: v for k, v in before.items() if k != port}
        assert audited(lab) == {("lossy_class", link_key("leaf-g1-r1 -- host-g1-h1"))}
        with CounterReader(lab) as reader:
            start = reader.read(checksums=False).interfaces
            with marking(lab, kmin=0):  # PFC alone: ECN would slow the senders before the queue overflows
                incast(lab)
            end = reader.read(checksums=False).interfaces
    drops = {key: end[key].get("qdisc_drops", 0) - start[key].get("qdisc_drops", 0) for key in end}
    assert drops[port] > 0 and sum(drops.values()) == drops[port], {k: v for k, v in drops.items() if v}
    assert pfc_client.thresholds(lab.paths.root) == before and audited(lab) == set()
    assert tbf_limit(lab, *port) == limit


# --- planned changes (issue 31) --------------------------------------------------------------------

def test_a_change_drains_a_spine_and_its_undo_restores_the_running_config(lab):
    """bgp graceful-shutdown on spine-1: the leaves' routes leave it (every remote prefix keeps one
    next hop, spine-2); the undo brings both back and leaves bgpd's configuration as it was. An undo
    that forgets a line is reported, not hidden."""
    asn = lab.fabric.nodes["spine-1"].asn
    drain = {"node": "spine-1", "config": [f"router bgp {asn}", "bgp graceful-shutdown"]}
    assert max(fib_next_hops(lab, "leaf-g1-r1").values()) == 2
    applied = Applied(lab, id="drain", kind="change", **drain, undo=[f"router bgp {asn}", "no bgp graceful-shutdown"])
    with applied:
        wait_for(lambda: max(fib_next_hops(lab, "leaf-g1-r1").values()) == 1,
                 what="the leaf's routes to leave the drained spine")
        assert unreachable_pairs(lab) == []
    assert applied.cleared["record"]["report"] == {"undo_left": []}
    assert max(fib_next_hops(lab, "leaf-g1-r1").values()) == 2

    timing, params = engine.parse({"id": "half", "kind": "change", **drain, "undo": [f"router bgp {asn}"]})
    engine.inject(faults_on(lab), timing, params)
    left = engine.clear(faults_on(lab), "half")["record"]["report"]["undo_left"]
    timing, params = engine.parse({"id": "fix", "kind": "change", **drain,
                                   "config": [f"router bgp {asn}", "no bgp graceful-shutdown"],
                                   "undo": [f"router bgp {asn}"]})
    engine.inject(faults_on(lab), timing, params)
    engine.clear(faults_on(lab), "fix")
    assert left == ["+ bgp graceful-shutdown"]
    converged(lab)
