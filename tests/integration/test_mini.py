"""mini (2-tier) on the real kernel: converged, reachable, status, exec, daemon death reported."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from twin.lab.bfd import client as bfd_client
from twin.lab.deploy import wait_converged
from twin.lab.kernel import netconf, shaping
from twin.lab.kernel.nsutil import interface_indexes, netlink_in
from twin.lab.reach import unreachable_pairs
from twin.lab.routing import vty
from twin.lab.routing.frr import PRELOADS, preload_path, vtysh_argv, vtysh_json
from twin.lab.status import lab_status
from twin.model import queue_tree
from twin.model.buffers import port_shaping
from twin.model.host_routing import host_routing, ip_commands
from twin.model.ports import Port

from .helpers import lab_running, twin_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mini(runtime, lab_ref):
    with lab_running(lab_ref("mini"), runtime) as running:
        yield running


def test_converged_and_healthy(mini):
    statuses = {s.name: s for s in lab_status(mini)}
    assert all(s.healthy for s in statuses.values()), [s for s in statuses.values() if not s.healthy]
    assert statuses["leaf-g1-r1"].bgp == {"spine-1": "Established", "spine-2": "Established"}
    assert len(statuses["spine-1"].bfd) == 2
    assert statuses["leaf-g1-r1"].ecmp_ok == statuses["leaf-g1-r1"].ecmp_expected == 2


def test_all_pairs_reachable_with_real_packets(mini):
    assert unreachable_pairs(mini) == []


def test_exec_passes_exit_code_through(mini):
    fabric = mini.fabric
    assert twin_cli("lab", "exec", fabric.name, "host-g1-h1", "--", "sh", "-c", "exit 7").returncode == 7
    ping = twin_cli("lab", "exec", fabric.name, "host-g1-h1", "--", "ping", "-c", "1", "-W", "2", "10.1.0.7")
    assert ping.returncode == 0, ping.stdout + ping.stderr


def test_status_cli_healthy(mini):
    fabric = mini.fabric
    result = twin_cli("lab", "status", fabric.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "leaf-g1-r1" in result.stdout


def test_status_states_the_lab_at_rest(mini):
    """CPU of the lab's own processes by program, and FRR's memory per switch, from /proc."""
    result = twin_cli("lab", "status", mini.fabric.name, "--json", "--idle-window", "1")
    status = json.loads(result.stdout)
    assert result.returncode == 0, _unhealthy(status) or result.stderr
    rest = status["idle"]
    assert {"bfdd", "bgpd", "zebra"} <= set(rest["by_program"])
    # mini at rest is 0.02 of a core: 0 ticks of 10 ms in a 1 s window happen (CI); bench/lab_lifecycle.py
    # measures the figure over 20 s
    assert 0 <= rest["cores"] < rest["machine_cores"] and rest["cores"] <= rest["machine_busy_cores"] + 0.2
    assert 5 < rest["switch_memory_mib"] < 200
    text = twin_cli("lab", "status", mini.fabric.name, "--idle-window", "1").stdout
    assert "at rest (1 s): the lab's processes" in text


def _unhealthy(status: dict) -> dict:
    """What made `twin lab status --json` answer unhealthy, short enough for an assertion message."""
    return {"switches": [s for s in status["switches"] if not s["healthy"]],
            "queues": {k: status["queues"][k] for k in ("healthy", "controller", "errors")},
            "bfd_data_plane_running": (status["bfd_data_plane"] or {}).get("running")}


def test_vty_socket_answers_as_vtysh_does(mini):
    """The convergence checks ask the daemons' vty sockets; vtysh (FRR's shell) is the reference."""
    for command in ("show bgp summary json", "show bfd peers json"):
        direct = vtysh_json(mini, "spine-1", command)
        shell = json.loads(mini.runtime.exec("spine-1", vtysh_argv(mini, "spine-1", command)).stdout)
        if command.startswith("show bgp"):
            direct, shell = ({a: p["state"] for a, p in d["ipv4Unicast"]["peers"].items()} for d in (direct, shell))
        else:
            direct, shell = ({p["peer"]: p["status"] for p in d} for d in (direct, shell))
        assert direct == shell and direct, command


U32_MATCH = re.compile(r"^  match ([0-9a-f]{8})/([0-9a-f]{8}) at (\d+)$", re.M)


def header_bytes(tree: str) -> str:
    """`tree` with each filter's u32 matches as the header bytes they compare: pyroute2 groups a
    filter's bytes into words starting at the first one (the protocol 'at 9'), tc aligns them ('at 8')."""
    def by_byte(words: str) -> str:
        compared = []
        for value, mask, offset in U32_MATCH.findall(words):
            for i, (v, m) in enumerate(zip(bytes.fromhex(value), bytes.fromhex(mask))):
                if m:
                    compared.append(f"  byte {int(offset) + i} {v & m:02x}/{m:02x}")
        return "\n".join(sorted(compared))
    return re.sub(r"(?:^  match .*$\n?)+", lambda found: by_byte(found.group(0)) + "\n", tree, flags=re.M)


@pytest.mark.parametrize("node", ["leaf-g1-r1", "host-g1-h1"])
def test_ports_are_shaped_as_pyroute2_and_the_export_shape_them(mini, node):
    """Bring-up sends shaping requests encoded once (nlbatch.py); pyroute2's own requests on a spare
    veth in the same node, and the containerlab export's tc commands on another, are built from the
    same tree (model/queue_tree.py): the kernel must hold the same tree from all three. A host's
    NIC has two filters more (the RoCE transport's responses), matching under a mask, and a control class."""
    port = next(link.endpoint(node).ifname for link in mini.fabric.links_of(node))
    rate, queue, mtu, nic = port_shaping(mini.fabric, Port(node, port))

    def tree(ifname: str) -> str:  # the direct queue's count differs: a switch's control has passed through it
        text = "".join(mini.runtime.exec(node, ["tc", "-d", what, "show", "dev", ifname]).stdout.replace(ifname, "X")
                       for what in ("qdisc", "class", "filter"))
        return re.sub(r"direct_packets_stat \d+", "direct_packets_stat N", text)
    spares = {}
    with mini.netlink(node) as ipr:
        for spare in ("ftwtest0", "ftwtest2"):  # gone with the namespace anyway
            ipr.link("add", ifname=spare, kind="veth", peer=spare[:-1] + str(int(spare[-1]) + 1))
            spares[spare] = ipr.link_lookup(ifname=spare)[0]
        try:
            shaping.shape(ipr, spares["ftwtest0"], rate, queue, mtu, nic)
            reference = tree("ftwtest0")
            for args in queue_tree.tc_commands(queue_tree.port_tree(rate, queue, mtu, nic), "ftwtest2"):
                made = mini.runtime.exec(node, ["tc", *args])
                assert made.rc == 0, (args, made.stderr)
            exported = tree("ftwtest2")
        finally:
            for index in spares.values():
                ipr.link("del", index=index)
    shaped = tree(port)
    # a switch's port also carries the PFC programs (clsact), which the spares have not
    clsact = shaped.find("qdisc clsact")
    if clsact >= 0:
        shaped = shaped.replace(shaped[clsact:shaped.find("\n", clsact) + 1], "")
    assert "htb 1:" in reference and reference == shaped
    nic = node.startswith("host")  # a NIC's control class 1:20, a switch's control the root's direct queue 1:
    assert exported.count("flowid 1:20 " if nic else "flowid 1: ") == (6 if nic else 4) and "tbf 20:" in exported
    assert header_bytes(exported) == header_bytes(reference), "the export's tc commands make another tree"


def test_a_hosts_routing_from_the_export_is_the_twins(mini):
    """A host's per-NIC rules and routes (model/host_routing.py), made by the containerlab export's
    `ip` commands in a scratch namespace whose NICs have the host's names and addresses, are those
    bring-up made over netlink in the host."""
    host = "host-g1-h1"
    scratch = f"ftw-test-routing-{os.getpid()}"

    def routing(*prefix: str) -> str:
        return "".join(subprocess.run([*prefix, "ip", "-4", *what], capture_output=True, text=True, check=True).stdout
                       for what in (["rule", "show"], ["route", "show", "table", "all"]))
    subprocess.run(["ip", "netns", "add", scratch], check=True)
    try:
        inside = ["ip", "netns", "exec", scratch]
        subprocess.run([*inside, "ip", "link", "set", "lo", "up"], check=True)  # as every node's is
        for number, link in enumerate(mini.fabric.links_of(host)):
            nic = link.endpoint(host)
            subprocess.run([*inside, "ip", "link", "add", nic.ifname, "type", "veth", "peer", "name",
                            f"ftwpeer{number}"], check=True)
            subprocess.run([*inside, "ip", "address", "add", str(nic.address), "dev", nic.ifname], check=True)
            for ifname in (nic.ifname, f"ftwpeer{number}"):
                subprocess.run([*inside, "ip", "link", "set", ifname, "up"], check=True)
        commands = ip_commands(host_routing(mini.fabric, mini.fabric.nodes[host]))
        assert any("uidrange" in c for c in commands) and any("table 101" in c for c in commands)
        for command in commands:
            subprocess.run([*inside, *command.split()], check=True)
        exported = routing(*inside)
    finally:
        subprocess.run(["ip", "netns", "del", scratch], check=True)
    made = routing("ip", "netns", "exec", mini.runtime.resource_name(host))
    assert "uidrange" in made and exported == made


def test_a_nodes_netlink_socket_is_made_in_it_by_the_calling_thread(mini, monkeypatch):
    """Lab.netlink opens its socket inside the node (nsutil.netlink_in), with no child process (pyroute2's
    netns= forks one per socket: 17 ms a node); a node that is gone fails and is not made anew."""
    def no_fork(*_args, **_kwargs):
        raise AssertionError("a process was forked to open a netlink socket")
    monkeypatch.setattr(os, "fork", no_fork)
    for node in ("leaf-g1-r1", "host-g2-h1"):
        with mini.netlink(node) as ipr:
            names = {m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}
        assert names == set(interface_indexes(mini.netns(node))), node
    open_fds = len(os.listdir("/proc/self/fd"))
    missing = mini.netns("leaf-g1-r1") + "-gone"
    with pytest.raises(FileNotFoundError):
        netlink_in(missing)
    assert not os.path.exists(missing) and len(os.listdir("/proc/self/fd")) == open_fds


def test_a_nodes_interface_macs_and_mtus_are_the_kernels_as_netlink_shows_them(mini):
    """nsutil reads every interface's hardware address (the PFC gates' kick frames carry it) and MTU
    (the config audit compares it) with one ioctl each: the same as the node's netlink link dump."""
    from twin.lab.kernel.nsutil import interface_macs, interface_mtus
    for node in ("leaf-g1-r1", "host-g2-h1"):
        with mini.netlink(node) as ipr:
            links = {m.get_attr("IFLA_IFNAME"): m for m in ipr.get_links()}
        macs, mtus = interface_macs(mini.netns(node)), interface_mtus(mini.netns(node))
        assert {name: mac.hex(":") for name, mac in macs.items()} == \
            {name: link.get_attr("IFLA_ADDRESS") for name, link in links.items()}, node
        assert mtus == {name: link.get_attr("IFLA_MTU") for name, link in links.items()}, node
        assert len({mac for name, mac in macs.items() if name != "lo"}) == len(macs) - 1, node


def test_a_nodes_link_counters_and_states_are_the_kernels_as_proc_and_flags_show_them(mini):
    """kernel/link_stats.py reads one raw link dump per node instead of /proc/net/dev and a flags ioctl
    per interface: every counter lies between two reads of the node's /proc/net/dev around it
    (counters only grow), and the operational state follows a link set down and up."""
    from twin.lab.kernel import rawdump
    from twin.lab.kernel.link_stats import LinkStatsReader
    from twin.lab.kernel.nsutil import in_netns
    columns = {"rx_bytes": 0, "rx_packets": 1, "rx_errors": 2, "rx_dropped": 3,
               "tx_bytes": 8, "tx_packets": 9, "tx_errors": 10, "tx_dropped": 11}

    def proc_net_dev(node):
        with in_netns(mini.netns(node)), open("/proc/thread-self/net/dev") as handle:
            rows = [line.partition(":") for line in handle.read().splitlines()[2:]]
        return {name.strip(): {k: int(values.split()[i]) for k, i in columns.items()} for name, _, values in rows}

    host = "host-g1-h1"
    for node in ("leaf-g1-r1", host):
        with rawdump.socket_in(mini.netns(node)) as sock:
            before, links, after = proc_net_dev(node), LinkStatsReader(sock).read(), proc_net_dev(node)
        assert {link.name for link in links} == set(before) == set(interface_indexes(mini.netns(node)))
        for link in links:
            assert link.index == interface_indexes(mini.netns(node))[link.name]
            for name, value in link.counters.items():
                assert before[link.name][name] <= value <= after[link.name][name], (node, link.name, name)
        assert all(link.running for link in links if link.name != "lo"), node
    sock = rawdump.socket_in(mini.netns(host))
    reader = LinkStatsReader(sock)
    try:
        added = mini.runtime.exec(host, ["ip", "link", "add", "t-probe", "type", "veth", "peer", "name", "t-peer"])
        assert added.rc == 0, added.stderr
        assert not {link.name: link.running for link in reader.read()}["t-probe"]
        for end in ("t-probe", "t-peer"):  # a veth end has carrier once both ends are up
            assert mini.runtime.exec(host, ["ip", "link", "set", end, "up"]).rc == 0
        assert {link.name: link.running for link in reader.read()}["t-probe"]
    finally:
        mini.runtime.exec(host, ["ip", "link", "del", "t-probe"])  # gone already if the add failed
        sock.close()


def test_every_port_steers_each_flow_to_one_cpu(mini):
    """Receive packet steering over all the machine's CPUs on every port (netconf.in_order_delivery):
    without it, a flow's packets sent by two CPUs reach the next hop out of order under load."""
    if not netconf.in_order_delivery():
        pytest.skip("this kernel has no net.core.rps_default_mask (6.2+)")
    expected = int(netconf.cpu_mask(os.sched_getaffinity(0)).replace(",", ""), 16)
    for node in mini.fabric.nodes:
        ports = [link.endpoint(node).ifname for link in mini.fabric.links_of(node)]
        show = "for p in \"$@\"; do cat /sys/class/net/$p/queues/rx-0/rps_cpus; done"
        listing = mini.runtime.exec(node, ["sh", "-c", show, "-", *ports]).stdout.split()
        assert [int(mask.replace(",", ""), 16) for mask in listing] == [expected] * len(ports), (node, listing)


def test_frr_runs_with_its_fixes_and_sessions_survive_a_reset(mini):
    """A namespace lab's daemons run with the fixes of native/ (make deps builds them); resetting
    every BGP session wipes bgpd's ring buffers (what the ringbuf fix replaces): the sessions come
    back and the lab converges again."""
    if mini.runtime.kind != "netns":
        pytest.skip("a docker lab's image runs FRR as shipped")
    for daemon in (r for r in mini.state.daemons() if r.node == "spine-1"):
        maps = Path(f"/proc/{daemon.pid}/maps").read_text()
        assert all(preload_path(name).name in maps for name in PRELOADS), f"{daemon.name} runs without a fix"
    vty.run(mini.state.node_dir("spine-1") / "bgpd.vty", ["clear bgp *"])
    wait_converged(mini, timeout_s=60)
    assert unreachable_pairs(mini) == []


def _bfd_states(lab, node: str) -> dict[str, str]:
    return {peer["peer"]: peer["status"] for peer in vtysh_json(lab, node, "show bfd peers json")}


def test_bfd_packets_are_the_data_planes_and_a_one_way_loss_downs_that_links_sessions_only(mini):
    """bfdd hands its sessions to the lab's BFD data plane (lab/bfd/): it holds no BFD socket, the
    data plane sends and receives for every switch (the steady packets in the kernel's fast path,
    fastpath.py, which the ports' faults reach as they reach any packet). A link that loses packets
    one way takes its two
    sessions down within the detection time (the deaf end by expiry, the other by hearing it), no
    other session, and they come back when it heals."""
    if not mini.fabric.bfd_offload:
        pytest.skip("bfdd sends its own packets on this runtime")
    fabric = mini.fabric
    bfdd = next(r for r in mini.state.daemons() if r.name == "spine-1/bfdd")
    sockets = subprocess.run(["nsenter", f"--net={mini.netns('spine-1')}", "ss", "-uanpH"],
                             capture_output=True, text=True, check=True).stdout
    assert ":3784 " in sockets and f"pid={bfdd.pid}," not in sockets, sockets
    stats = bfd_client.stats_after(mini, time.monotonic())
    assert stats["sessions"] == stats["up"] == 2 * len([link for link in fabric.links if link.kind == "fabric"])
    # At rest every session's packets are the kernel's: the data plane itself sends and takes none.
    deadline = time.monotonic() + 10
    while stats["in_kernel"] < stats["sessions"] and time.monotonic() < deadline:
        stats = bfd_client.stats_after(mini, time.monotonic())
    later = bfd_client.stats_after(mini, time.monotonic() + 1.0)
    assert stats["fast_path"] and later["in_kernel"] == later["sessions"], later
    assert later["tx_in_kernel"] > stats["tx_in_kernel"] and later["rx_in_kernel"] > stats["rx_in_kernel"]
    assert (later["tx_packets"] - later["tx_in_kernel"], later["rx_packets"] - later["rx_in_kernel"]) == (
        stats["tx_packets"] - stats["tx_in_kernel"], stats["rx_packets"] - stats["rx_in_kernel"])
    link = next(link for link in fabric.links if {link.a.node, link.b.node} == {"leaf-g1-r1", "spine-1"})
    leaf_end, spine_end = (link.a, link.b) if link.a.node == "leaf-g1-r1" else (link.b, link.a)
    before = {node: _bfd_states(mini, node) for node in ("leaf-g1-r1", "spine-1", "spine-2")}
    assert all(state == "up" for states in before.values() for state in states.values())
    # Everything spine-1 sends the leaf is lost on the wire (the ports' physical layer): BFD's packets
    # in the kernel's fast path (lab/bfd/fastpath.py) are lost with the rest, as on a real cable.
    cut_link = twin_cli("fault", "inject", fabric.name, "silent_drop", "--id", "bfdcut", "--link",
                        "spine-1 -- leaf-g1-r1", "--direction", "a_to_b", "-p", "loss_pct=100")
    assert cut_link.returncode == 0, cut_link.stdout + cut_link.stderr
    try:
        cut = {("leaf-g1-r1", str(spine_end.address.ip)), ("spine-1", str(leaf_end.address.ip))}
        deadline = time.monotonic() + 3 * fabric.bfd_interval_ms * fabric.bfd_multiplier / 1000
        while True:
            now = {node: _bfd_states(mini, node) for node in before}
            down = {(node, peer) for node, states in now.items() for peer, state in states.items() if state != "up"}
            if down >= cut or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert down == cut, now
    finally:
        twin_cli("fault", "clear", fabric.name, "bfdcut")
    wait_converged(mini, timeout_s=60)
    assert {node: _bfd_states(mini, node) for node in before} == before


def test_dead_daemon_is_reported(mini):
    """Runs last in this module: it kills spine-1's bgpd."""
    bgpd = next(r for r in mini.state.daemons() if r.name == "spine-1/bgpd")
    os.kill(bgpd.pid, signal.SIGKILL)
    time.sleep(0.2)
    statuses = {s.name: s for s in lab_status(mini)}
    fabric = mini.fabric
    assert statuses["spine-1"].daemons["bgpd"] is False
    assert not statuses["spine-1"].healthy
    result = twin_cli("lab", "status", fabric.name)
    assert result.returncode == 1 and "dead: bgpd" in result.stdout
