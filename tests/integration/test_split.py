"""A lab split over machines that runs: two namespaces stand for two machines, each holding its
underlay address; each brings up its share of a copy of mini (`twin lab up --machines 2 --machine K
--address ...`), and the shares converge with each other over VXLAN."""

import subprocess
import time
from contextlib import contextmanager

import pytest

from twin.lab.handle import Lab
from twin.lab.kernel.nsutil import interface_indexes, netlink_in
from twin.lab.kernel.vxlan import VXLAN_OVERHEAD
from twin.lab.routing.converge import kernel_next_hops
from twin.lab.state import load_state

from .helpers import ROOT, leftovers, twin_argv, twin_cli

# One group: both tests use the same machine namespaces and lab name (xdist would run them at once).
pytestmark = [pytest.mark.integration, pytest.mark.own_labs, pytest.mark.xdist_group("split")]

LAB = "splitmini"  # a copy of mini: a share is named <lab>-m<K>
MACHINES = ["ftt-split-m1", "ftt-split-m2"]  # the test's own machine namespaces
ADDRESSES = "10.251.0.1,10.251.0.2"


@contextmanager
def machines(mtu: int):
    """Two namespaces joined by a veth of `mtu`, each with its machine's address; removed after."""
    for name in MACHINES:
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ip = ["ip", "-n", MACHINES[0]]
        subprocess.run([*ip, "link", "add", "u0", "mtu", str(mtu), "type", "veth", "peer", "name", "u0",
                        "netns", MACHINES[1], "mtu", str(mtu)], check=True)
        for name, address in zip(MACHINES, ADDRESSES.split(","), strict=True):
            subprocess.run(["ip", "-n", name, "addr", "add", f"{address}/24", "dev", "u0"], check=True)
            subprocess.run(["ip", "-n", name, "link", "set", "u0", "up"], check=True)
        yield
    finally:
        for name in MACHINES:
            subprocess.run(["ip", "netns", "del", name], check=False)


def up_command(lab_file, machine: int) -> list[str]:
    return ["lab", "up", str(lab_file), "--machines", "2", "--machine", str(machine), "--address", ADDRESSES,
            "--underlay", MACHINES[machine - 1], "--timeout", "90"]


@pytest.fixture
def lab_file(tmp_path):
    path = tmp_path / f"{LAB}.yaml"
    path.write_text((ROOT / "labs" / "mini.yaml").read_text().replace("name: mini", f"name: {LAB}"))
    return path


def share_names() -> list[str]:
    return [f"{LAB}-m1", f"{LAB}-m2"]


def test_an_underlay_mtu_too_small_for_vxlan_is_refused_before_anything_is_built(lab_file):
    with machines(mtu=9000):  # mini's MTU is 9000: the underlay needs 9050
        result = twin_cli(*up_command(lab_file, 1))
        assert result.returncode != 0, result.stdout + result.stderr
        assert f"needs {9000 + VXLAN_OVERHEAD}" in result.stderr and "Traceback" not in result.stderr
        assert load_state(share_names()[0]) is None and leftovers(share_names()[0]) == []
        with netlink_in(f"/run/netns/{MACHINES[0]}") as ipr:
            assert sorted(link.get_attr("IFLA_IFNAME") for link in ipr.get_links()) == ["lo", "u0"]


def test_a_split_mini_converges_across_machines_and_a_cut_crossing_link_reroutes(lab_file):
    with machines(mtu=9000 + VXLAN_OVERHEAD):
        try:
            # Both shares at once, as two machines would: each waits for the other's sessions.
            procs = [subprocess.Popen(twin_argv(*up_command(lab_file, k)), cwd=ROOT, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for k in (1, 2)]
            outputs = [proc.communicate(timeout=240)[0] for proc in procs]
            assert [proc.returncode for proc in procs] == [0, 0], outputs
            hosts_side, spines_side = (Lab.open(name) for name in share_names())
            # mini splits as leaves and hosts on machine 1, spines on machine 2: every path crosses
            assert {n.name for n in spines_side.fabric.local_nodes} == {"spine-1", "spine-2"}
            assert set(interface_indexes(spines_side.netns("spine-1"))) == {"lo", "lf-g1r1", "lf-g2r1"}
            for name in share_names():
                status = twin_cli("lab", "status", name, "--idle-window", "0")
                assert status.returncode == 0, status.stdout + status.stderr
            ping = twin_cli("lab", "exec", share_names()[0], "host-g1-h1", "--", "ping", "-c", "2", "-W", "2",
                            "-I", "10.1.0.1", "10.1.0.7")
            assert ping.returncode == 0, ping.stdout + ping.stderr

            # What needs every node on one machine says so (the probe mesh counts what each host receives).
            for argv in (["probe", share_names()[0], "--duration", "1"],
                         ["lab", "drain", share_names()[0], "leaf-g1-r1 -- spine-1"]):
                refused = twin_cli(*argv)
                assert refused.returncode != 0 and "needs the whole lab" in refused.stderr, refused.stderr

            # A fault that acts on both ends (a drop on the leaf's egress) is injected where that end runs.
            elsewhere = twin_cli("fault", "inject", share_names()[1], "silent_drop", "--link", "leaf-g1-r1 -- spine-1",
                                 "-p", "loss_pct=5")
            assert elsewhere.returncode != 0 and "not on this machine" in elsewhere.stderr, elsewhere.stderr
            assert Lab.open(share_names()[1]).state.faults == []

            # A link_down on machine 1 takes its end down; machine 2's spine hears BFD stop and reroutes.
            prefix = next(p for p in kernel_next_hops(spines_side, "spine-1") if str(p) == "10.1.0.0/31")
            cut = twin_cli("fault", "inject", share_names()[0], "link_down", "--link", "leaf-g1-r1 -- spine-1")
            assert cut.returncode == 0, cut.stdout + cut.stderr
            assert _waits_for(lambda: prefix not in kernel_next_hops(spines_side, "spine-1"), 15)
            assert kernel_next_hops(spines_side, "spine-2")[prefix] == 1  # the other spine still reaches it
            clear = twin_cli("fault", "clear", share_names()[0], "link-down")
            assert clear.returncode == 0, clear.stdout + clear.stderr
            assert _waits_for(lambda: prefix in kernel_next_hops(spines_side, "spine-1"), 30)
        finally:
            for name in share_names():
                twin_cli("lab", "down", name)
        for name in share_names():
            assert leftovers(name) == [], leftovers(name)
        for name in MACHINES:  # the tunnels went with their nodes; the underlay holds what it held
            with netlink_in(f"/run/netns/{name}") as ipr:
                assert sorted(link.get_attr("IFLA_IFNAME") for link in ipr.get_links()) == ["lo", "u0"]


def _waits_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
