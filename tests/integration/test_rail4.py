"""rail4 (3-tier, 4 rails) on the real kernel: ECMP, BGP, BFD, per-NIC routing, shaping within 5%.
On both runtimes: the docker tier runs the same fabric as 22 containers."""

import json
import subprocess
import time

import pytest

from twin.collectives.cpu import CpuMeter
from twin.lab.kernel.shaping import shaped_rate_bps
from twin.lab.reach import unreachable_pairs
from twin.lab.status import lab_status

from .helpers import lab_running, netns_tier_only

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def rail4(runtime, lab_ref):
    with lab_running(lab_ref("rail4"), runtime) as running:
        yield running


def test_bgp_bfd_ecmp_everywhere(rail4):
    statuses = {s.name: s for s in lab_status(rail4)}
    for status in statuses.values():
        assert set(status.bgp.values()) == {"Established"}, status
        assert set(status.bfd.values()) == {"up"}, status
        assert status.ecmp_ok == status.ecmp_expected, status.ecmp_short
    assert len(statuses["spine-r2-s1"].bgp) == 4  # 2 leaves of plane 2 + 2 superspines
    assert statuses["superspine-1"].ecmp_expected == 16


def test_all_pairs_reachable(rail4):
    assert unreachable_pairs(rail4) == []


def test_traffic_from_nic_r_leaves_through_nic_r(rail4):
    runtime = rail4.runtime
    for rail in (1, 3):
        source = f"10.{rail}.0.1"  # host-g1-h1 nic<rail>
        got = runtime.exec("host-g1-h1", ["ip", "-j", "route", "get", "10.2.0.7", "from", source])
        assert json.loads(got.stdout)[0]["dev"] == f"nic{rail}"


def test_every_link_direction_is_shaped(rail4):
    fabric = rail4.fabric
    for node in fabric.nodes:
        with rail4.netlink(node) as ipr:
            for link in fabric.links_of(node):
                index = ipr.link_lookup(ifname=link.endpoint(node).ifname)[0]
                assert shaped_rate_bps(ipr, index) == fabric.rate_bps, (node, link.name)


# A single ECN-capable TCP flow holds the line only on a quiet machine. Beside another lab's
# bring-up (what the other xdist worker does), the shapers' timers fire late, each hop loses line
# time it cannot catch up, the queue that builds behind a slower hop is ECN-marked and the flow
# cuts its window: CI (stop 44) saw 176.6 Mbit/s on the docker tier; on this lab beside
# `twin lab up rail8`: 158-162 Mbit/s, 189-191 with the sender's ECN off, 195-198 alone. The test
# measures the link's shaping, not the machine's load: it runs alone (marker quiet).
@pytest.mark.quiet
def test_achieved_rate_within_5_percent(rail4):
    """A real TCP flow across leaf -> spine -> superspine -> spine -> leaf."""
    fabric, runtime = rail4.fabric, rail4.runtime
    server_ns = runtime.resource_name("host-g2-h2")
    server = subprocess.Popen(["ip", "netns", "exec", server_ns, "iperf3", "-s", "-1", "-B", "10.2.0.7"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        cpu = CpuMeter()
        result = runtime.exec("host-g1-h1", ["iperf3", "-c", "10.2.0.7", "-B", "10.1.0.1", "-t", "4",
                                             "-O", "1", "-J"], timeout=30)
        busy = cpu.busy_pct()
        assert result.rc == 0, result.stderr
        report = json.loads(result.stdout)
    finally:
        server.kill()
        server.wait()
    received = report["end"]["sum_received"]["bits_per_second"]
    seconds = [i["sum"]["bits_per_second"] for i in report["intervals"] if not i["sum"].get("omitted")]
    # What the machine did meanwhile, for a failure to say: CI's serial tier saw 148.5 Mbit/s here
    # (2026-12-02) and, the same day, 77.8; the cause was a quiet machine's halted vCPUs waking late
    # for the shapers' timers, which the lab's CPU latency request now prevents (procs.cpus_awake;
    # docs/benchmarks.md, "The CPUs' idle states and the ports' timers"); and on a slow VM 178-186,
    # steadily, from timers late by less (HTB's default burst could not make up for them; now two
    # frames: "The shapers' burst").
    said = (f"{received / 1e6:.1f} Mbit/s; per second {[round(b / 1e6, 1) for b in seconds]}; "
            f"{report['end']['sum_sent'].get('retransmits')} retransmits; cores busy {busy} %")
    assert abs(received - fabric.rate_bps) / fabric.rate_bps <= 0.05, said


def test_bfd_runs_with_the_lab_timers_and_guards_bgp(rail4):
    state, fabric = rail4.state, rail4.fabric
    from twin.lab.routing.frr import vtysh_json
    peers = vtysh_json(rail4, "spine-r1-s1", "show bfd peers json")
    assert len(peers) == 4
    for peer in peers:
        assert (peer["status"], peer["transmit-interval"], peer["detect-multiplier"]) == \
            ("up", fabric.bfd_interval_ms, fabric.bfd_multiplier)
    neighbor = vtysh_json(rail4, "leaf-g1-r1", "show bgp neighbors 10.0.0.0 json")["10.0.0.0"]
    assert neighbor["peerBfdInfo"]["status"] == "Up"
    # No BFD-induced reset at bring-up. (connectionsDropped is not the measure: simultaneous
    # opens end in FRR's "Connection Collision Resolution", which sometimes counts as a drop.)
    for node in ("leaf-g1-r1", "spine-r1-s1"):
        log = (state.node_dir(node) / "frr.log").read_text(errors="replace")
        assert "(Cease/BFD Down)" not in log, f"{node}: BFD reset a BGP session at bring-up"


def test_ranks_use_their_own_rail_even_toward_another_rail(rail4):
    """gloo binds only its listener; the uidrange rules must still send each rank's connections
    out of its own NIC, so cross-rail rings cross the superspines and rail rings never do."""
    from twin.collectives.bench import run_bench

    cross = run_bench(rail4, "allreduce", [1 << 20], ranks="hosts:host-g1-h1,host-g2-h2", iters=2, warmup=0)
    rail = run_bench(rail4, "allreduce", [1 << 20], ranks="rail:2", iters=2, warmup=0)
    assert cross.measurements[0].wrong == rail.measurements[0].wrong == 0
    assert cross.superspine_bytes > 2 << 20, "cross-rail ring hops did not cross the superspines"
    # Control traffic (BGP, BFD) crosses the superspines all the time, more the longer the run;
    # a ring hop through them would carry megabytes.
    assert rail.superspine_bytes * 20 < min(rail.spine_bytes, cross.superspine_bytes), \
        (rail.superspine_bytes, rail.spine_bytes, cross.superspine_bytes)


def test_probe_paths_cover_every_link_no_ecmp_polarization(rail4):
    """With one ECMP hash seed on every switch, the 3-tier fabric used 2 of its 8 cross-rail
    paths and left half the superspine links unused; each switch has its own seed now."""
    from twin.probes.run import run_probe_mesh

    summary = run_probe_mesh(rail4, duration_s=2, interval_ms=200)
    assert summary["uncovered"] == []
    # The kernel's hash spread the candidates so that the selection crosses every link direction
    # 3 times (a polarized hash would leave superspine links short), with about one flow per link
    # direction (a quarter more, so that no link is on more than half of another's paths): the
    # cost grows with links. Beside them, the flows testing leaves' routes no link-covering flow tests.
    coverage = summary["coverage"]
    assert coverage["hops_short"] == 0 and coverage["ambiguous"] == []
    assert coverage["flows"] <= 1.25 * coverage["hops"] and coverage["hops"] == 96
    assert summary["paths"] == coverage["flows"] + coverage["route_flows"]
    assert summary["lost"] == 0


def test_miswire_crosses_two_nics_cables_and_the_leaves_lldp_names_the_host(rail4):
    """host-g1-h1's nic1 and nic2 cables swapped at the leaves: both NICs lose what is sent to them
    (their leaves' frames reach the other NIC, which is not addressed), nic3 keeps working, the
    leaves' queues count every frame off (nothing left in them), LLDP at each leaf port hears the
    other NIC and config-audit names the host; clearing restores every filter and qdisc."""
    from twin.detect import config_audit
    from twin.faults import engine
    from twin.faults.base import FaultContext
    from twin.lab import kernel_state as snapshot
    from twin.lab.pfc import published as pfc_counters
    from twin.lab.routing import lldp
    from twin.lab.traffic import udp_burst
    from twin.model.nics import fabric_nics

    nics = {n.label: n for n in fabric_nics(rail4.fabric)}
    host, port = "host-g1-h1", rail4.fabric.find_link("leaf-g1-r1", "host-g1-h1").endpoint("leaf-g1-r1").ifname

    def audited():
        return {(f.kind, f.link or f.node) for f in config_audit.sweep(rail4)}

    def burst(label):
        return udp_burst(rail4, nics[label.replace("host-g1-h1", "host-g2-h2")], nics[label], 200, settle_s=0.5)

    def settled(predicate, what):
        deadline = time.monotonic() + 10
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    settled(lambda: lldp.neighbors(rail4, "leaf-g1-r1").get(port) == lldp.Neighbor(host, "nic1"),
            "leaf-g1-r1's LLDP to hear host-g1-h1 nic1")
    assert audited() == set()
    before = snapshot.take(rail4)
    entry = {"id": "cables", "kind": "miswire", "node": host, "nics": ["nic1", "nic2"]}
    timing, params = engine.parse(entry)
    engine.inject(FaultContext(rail4), timing, params)
    try:
        settled(lambda: audited() == {("miswire", host)}, "config-audit to name the host")
        assert lldp.neighbors(rail4, "leaf-g1-r1")[port] == lldp.Neighbor(host, "nic2")
        assert burst("host-g1-h1:nic1").received == 0
        assert burst("host-g1-h1:nic2").received == 0
        assert burst("host-g1-h1:nic3").received == 200
        # The frames toward nic1 were counted off leaf-g1-r1's queue where they arrived, not moved
        # with the frame onto nic2's count (the queue would keep them for good and pause its senders).
        settled(lambda: pfc_counters.ports(pfc_counters.read(rail4.state.directory))[("leaf-g1-r1", port)].queue
                == 0, "leaf-g1-r1's queue toward the host to drain")
    finally:
        engine.clear(FaultContext(rail4), "cables")
    assert snapshot.differences(before, snapshot.take(rail4)) == []
    assert burst("host-g1-h1:nic1").received == 200
    settled(lambda: audited() == set(), "LLDP to hear the cabling as the lab has it")


def test_miswire_at_a_leaf_swaps_its_uplinks_so_both_sessions_stay_down_until_cleared(rail4):
    """leaf-g1-r1's cables to its two spines swapped at the leaf: each uplink faces the other
    spine, whose /31 is not its own, so both BGP sessions go down while the links stay up; the
    spines' LLDP hears the leaf's ports swapped and config-audit names the leaf; clearing brings
    the sessions back and restores every filter, route and FIB."""
    from twin.detect import config_audit
    from twin.faults import engine
    from twin.faults.base import FaultContext
    from twin.lab import kernel_state as snapshot
    from twin.lab.deploy import wait_converged

    leaf, spines = "leaf-g1-r1", ("spine-r1-s1", "spine-r1-s2")
    ports = [rail4.fabric.find_link(leaf, spine).endpoint(leaf).ifname for spine in spines]

    def audited():
        return {(f.kind, f.link or f.node) for f in config_audit.sweep(rail4)}

    def settled(predicate, what):
        deadline = time.monotonic() + 15
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    def sessions():
        return {spine: state for spine, state in {s.name: s for s in lab_status(rail4)}[leaf].bgp.items()
                if spine in spines}

    settled(lambda: audited() == set(), "LLDP to hear the cabling as the lab has it")
    before = snapshot.take(rail4)
    timing, params = engine.parse({"id": "uplinks", "kind": "miswire", "node": leaf, "ports": ports})
    engine.inject(FaultContext(rail4), timing, params)
    try:
        settled(lambda: audited() == {("miswire", leaf)}, "config-audit to name the leaf")
        settled(lambda: all(state != "Established" for state in sessions().values()),
                "both of the leaf's sessions to go down")
        with rail4.netlink(leaf) as ipr:
            assert all(ipr.link_lookup(ifname=port) and ipr.get_links(ipr.link_lookup(ifname=port)[0])[0]
                       .get_attr("IFLA_OPERSTATE") == "UP" for port in ports)  # the links stay up
    finally:
        engine.clear(FaultContext(rail4), "uplinks")
    wait_converged(rail4)
    assert set(sessions().values()) == {"Established"}
    assert snapshot.differences(before, snapshot.take(rail4)) == []


# What each kind legitimately shows on a node, as real hardware would (issue 36): everything else a
# trainee can list must read as on the healthy lab. Kinds not named here must show nothing at all
# but routing's reaction (SYMPTOMS).
SYMPTOMS = {"fib"}  # routes that moved because BFD or BGP lost packets: a 100 % drop of a fifth of the
# flows hits a BFD session's 5-tuple about one bring-up in three, and an operator sees that too
VISIBLE = {
    "link_down": ({"links", "routes", "fib"}, "a port that is down, its connected route gone, the FIB without it"),
    "switch_down": ({"links", "routes", "fib", "running_config"}, "a dead switch: its ports down, no routing daemon"),
    "bgp_down": ({"running_config", "fib"}, "a session shut in the running configuration"),
    "slow_node": ({"classes"}, "the NIC's rate, as `ethtool` shows a NIC that negotiated a lower speed"),
    "mtu_mismatch": ({"links"}, "the port's MTU"),
    "ecmp_width": ({"running_config", "fib"}, "maximum-paths in the running configuration"),
    "peer_mismatch": ({"running_config", "fib"}, "the neighbour's AS in the running configuration"),
    "route_filter": ({"running_config", "fib"}, "the route map in the running configuration"),
    "hash_policy": ({"sysctls"}, "the configured ECMP hash policy"),
}


def test_no_hidden_fault_can_be_listed_on_any_node(rail4, runtime):
    """A cheater's view (issue 36): every kind a training level hides, drawn as the level draws it,
    applied to rail4; everything a trainee could list on every node (nft ruleset, qdiscs, classes,
    clsact filters and the programs they run, links, routes, rules, the fault sysctls, FRR's
    running configuration and FIB) is compared with the healthy lab. Only what real hardware shows
    of that kind may differ (VISIBLE). The ports' physical layer (lab/ports/phy.py) is not listable by a
    node's commands: it stands for the optics and the forwarding chip. The GPU kinds of level 5 are
    left out: they act inside a running job (its control files), not on the fabric."""
    # 74 s of CI's parallel part for the same comparison: the kinds act on the same kernel
    # objects through the node's namespace on either runtime, and what a node lists of them is
    # the namespace's (a container's `tc`, `nft` and `ip` read the kernel, as ip netns exec's do)
    netns_tier_only(runtime, "what a fault leaves listable is the kernel's, whatever runs the node")
    import random

    from twin.faults import engine
    from twin.faults.base import FaultContext
    from twin.faults.registry import FAULTS
    from twin.lab import kernel_state as snapshot
    from twin.lab.deploy import wait_converged
    from twin.lab.pfc.controller import WATCHDOG_TABLES
    from twin.train import pools

    def listable(snap):
        return {node: {key: value if key != "nft" else [o for o in value if not watchdog_acting(o)]
                       for key, value in entry.items() if key != "phy"} for node, entry in snap.items()}

    def watchdog_acting(nft_object: dict) -> bool:
        """The PFC watchdog's drop mode (nft) on a port held longer than its watchdog: what a switch
        shows of a storm it caught (SONiC's `show pfcwd stats`, its log line), not a leak. A snapshot
        slower than the watchdog (2 s in pfc_storm's training entry) lists it: CI, 2026-12-02."""
        tables = [body.get("name") if kind == "table" else body.get("table")
                  for kind, body in nft_object.items() if isinstance(body, dict)]
        return any(isinstance(t, str) and t.startswith(WATCHDOG_TABLES) for t in tables)

    fabric, rng = rail4.fabric, random.Random(36)
    entries = [{"kind": name, **kind.training_entry(fabric, rng, pools._fabric_links(fabric))}
               for name, kind in sorted(FAULTS.items())
               if kind.training_level in (1, 2, 3, 4) and kind.trainable(fabric)]
    entries.append({"kind": "silent_drop", "link": pools._fabric_links(fabric)[0], "loss_pct": 100, "flows_pct": 20})
    assert {"silent_drop", "bitflip", "blackhole", "miswire", "pfc_storm"} <= {e["kind"] for e in entries}
    healthy = snapshot.take(rail4)
    leaked, seen = {}, set()
    for number, entry in enumerate(entries):
        entry = {"id": f"hidden-{number}", **entry}
        engine.inject(FaultContext(rail4), *engine.parse(entry))
        try:
            during = snapshot.take(rail4)
        finally:
            engine.clear(FaultContext(rail4), entry["id"])
        allowed = VISIBLE.get(entry["kind"], (set(), ""))[0] | SYMPTOMS
        listed = snapshot.differences(listable(healthy), listable(during))
        seen |= {entry["kind"]} if listed else set()
        shown = [line for line in listed if line.split(" ", 2)[1].rstrip(":") not in allowed]
        if shown:
            leaked[entry["kind"]] = shown[:3]
        wait_converged(rail4)
        assert snapshot.differences(healthy, snapshot.take(rail4)) == [], entry
    assert leaked == {}
    # The comparison sees what it should: the kinds hardware does show were listed as different.
    assert {"link_down", "bgp_down", "mtu_mismatch", "hash_policy"} <= seen, seen
