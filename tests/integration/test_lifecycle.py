"""Ownership and cleanup: kill -9 then down, Ctrl-C and failed deploys roll back, labs side by side,
and cleanup never touches what the tool does not own."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from pyroute2 import netns

from twin.lab import awake, neigh
from twin.lab.pfc import client as pfc_client
from twin.lab.reach import unreachable_pairs
from twin.lab.routing.frr import vtysh_json
from twin.lab.state import lab_dir
from twin.procs import CPU_LATENCY_QOS, alive

from .helpers import ROOT, lab_copy, lab_running, leftovers, twin_cli

pytestmark = [pytest.mark.integration, pytest.mark.own_labs]  # crash, intr, side-a, ...


def _start_up(ref: str, *options: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from twin.cli import main; main()", "lab", "up", ref, *options],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for_daemons(lab: str, count: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = json.loads((lab_dir(lab) / "state.json").read_text())
            if sum(1 for r in state["resources"] if r["kind"] == "daemon" and r["pid"]) >= count:
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.02)
    pytest.fail(f"lab {lab} never started {count} daemons")


def test_kill_9_during_up_then_down_leaves_nothing(tmp_path):
    path = lab_copy(tmp_path, "mini", "crash")
    proc = _start_up(str(path))
    try:
        _wait_for_daemons("crash", 6)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert leftovers("crash"), "the crash should have left the half-built lab behind"
        result = twin_cli("lab", "down", "crash")
        assert result.returncode == 0, result.stderr
    finally:
        proc.kill()
        twin_cli("lab", "down", "crash")
    assert leftovers("crash") == []


def test_ctrl_c_during_up_rolls_back(tmp_path):
    path = lab_copy(tmp_path, "mini", "intr")
    proc = _start_up(str(path))
    try:
        _wait_for_daemons("intr", 4)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) != 0
        assert leftovers("intr") == []
    finally:
        proc.kill()
        twin_cli("lab", "down", "intr")


def test_failed_up_rolls_back(tmp_path):
    path = lab_copy(tmp_path, "mini", "fail")
    result = twin_cli("lab", "up", str(path), "--timeout", "0")
    assert result.returncode == 2
    # No time at all: whichever wait comes first gives up (bgpd not yet told its interfaces by a
    # busy zebra, or the routes).
    assert re.search(r"error: (routing did not converge|bgpd on \S+ did not learn its interfaces from zebra in time)",
                     result.stderr), result.stderr
    assert leftovers("fail") == []


def test_two_labs_side_by_side(tmp_path):
    with lab_running(str(lab_copy(tmp_path, "mini", "side-a"))) as side_a:
        with lab_running(str(lab_copy(tmp_path, "mini", "side-b"))) as side_b:
            assert unreachable_pairs(side_a) == []
            assert unreachable_pairs(side_b) == []
            # each lab reserved its ARP entries in the machine-wide table (other tests' labs may too)
            book = neigh.reserved()
            assert book["side-a"] == book["side-b"] == neigh.entries_needed(side_a.fabric)
            assert int((neigh.SYSCTL_DIR / "gc_thresh3").read_text()) >= 1024 + sum(book.values())
        # side-b is gone; side-a is untouched and still forwards
        assert "side-b" not in neigh.reserved() and "side-a" in neigh.reserved()
        assert unreachable_pairs(side_a) == []
        assert twin_cli("lab", "status", "side-a").returncode == 0
    assert "side-a" not in neigh.reserved()


def test_a_lossy_lab_without_a_bfd_data_plane_keeps_the_cpus_awake_while_it_is_up(tmp_path):
    """The lab holds the CPU latency request itself (lab/awake.py), not its PFC controller or BFD
    data plane: this one runs neither, and its shapers' timers need it all the same."""
    path = lab_copy(tmp_path, "mini", "awake")
    path.write_text(path.read_text().replace("mtu: 9000", "mtu: 9000\n  pfc: false\n  ecn: false")
                    .replace("multiplier: 3}", "multiplier: 3, offload: false}"))
    with lab_running(str(path)) as lab:
        assert not lab.fabric.queue_programs and not lab.fabric.bfd_offload
        assert not pfc_client.running(lab.state)
        holders = [r for r in lab.state.resources if r.name == awake.RESOURCE]
        assert len(holders) == 1 and alive(holders[0].pid)
        with open(CPU_LATENCY_QOS, "rb") as target:
            assert target.read(4) == bytes(4), "the kernel's CPU latency target is not 0 us"
    assert not alive(holders[0].pid)


def test_a_lab_with_4_byte_asns_converges(tmp_path):
    """FRR takes RFC 6996's 4-byte private ASNs (what labs beyond 488 leaves get), here on mini."""
    path = lab_copy(tmp_path, "mini", "asn4")
    path.write_text(path.read_text().replace("routing:\n", "routing:\n  asn_plan: 4-byte\n"))
    with lab_running(str(path)) as lab:
        assert lab.fabric.nodes["leaf-g1-r1"].asn >= 4_200_000_000
        summary = vtysh_json(lab, "leaf-g1-r1", "show bgp summary json")["ipv4Unicast"]
        assert summary["as"] == lab.fabric.nodes["leaf-g1-r1"].asn
        assert {p["remoteAs"] for p in summary["peers"].values()} == {lab.fabric.nodes["spine-1"].asn}
        assert all(p["state"] == "Established" for p in summary["peers"].values())
        assert unreachable_pairs(lab) == []


@pytest.mark.machine_wide
def test_cleanup_touches_only_what_it_owns(tmp_path):
    foreign = f"not-ours-{os.getpid()}"
    netns.create(foreign)
    try:
        lab = lab_copy(tmp_path, "mini", "clean")
        assert twin_cli("lab", "up", str(lab)).returncode == 0
        result = twin_cli("cleanup")
        assert result.returncode == 0 and "removed lab clean" in result.stdout
        assert leftovers("clean") == []
        assert foreign in netns.listnetns()
    finally:
        twin_cli("lab", "down", "clean")
        netns.remove(foreign)


def test_up_twice_is_refused(tmp_path):
    path = lab_copy(tmp_path, "mini", "twice")
    with lab_running(str(path)):
        result = twin_cli("lab", "up", str(path))
        assert result.returncode == 2 and "is already up" in result.stderr


@pytest.mark.docker
def test_docker_kill_9_during_up_then_down_leaves_no_container(tmp_path, docker_images):
    path = lab_copy(tmp_path, "mini", "dcrash")
    proc = _start_up(str(path), "--runtime", "docker")
    try:
        _wait_for_daemons("dcrash", 6)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert any(item.startswith("container ") for item in leftovers("dcrash"))
        result = twin_cli("lab", "down", "dcrash")
        assert result.returncode == 0, result.stderr
    finally:
        proc.kill()
        twin_cli("lab", "down", "dcrash")
    assert leftovers("dcrash") == []


@pytest.mark.docker
@pytest.mark.machine_wide
def test_docker_cleanup_finds_a_lab_by_its_labels_and_spares_other_containers(tmp_path, docker_images):
    from twin.lab.runtime.docker import client
    from twin.lab.runtime.images import image_for
    api = client()
    # Named like ours but not labelled: not ours.
    foreign = api.containers.run(image_for("switch"), name=f"ftw-notours.{os.getpid()}", detach=True,
                                 network_mode="none", command=["sleep", "infinity"])
    try:
        assert twin_cli("lab", "up", str(lab_copy(tmp_path, "mini", "dclean")), "--runtime", "docker").returncode == 0
        subprocess.run(["rm", "-rf", str(lab_dir("dclean"))], check=True)  # the state is lost
        result = twin_cli("cleanup")
        assert result.returncode == 0 and "removed lab dclean: 8 nodes" in result.stdout, result.stdout
        # Its PFC controller, recorded only in the lost state, ends itself once the state is gone.
        deadline = time.monotonic() + 10
        while leftovers("dclean") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leftovers("dclean") == []
        foreign.reload()
        assert foreign.status == "running"
    finally:
        twin_cli("lab", "down", "dclean")
        foreign.remove(force=True)
        api.close()
