"""mini (2-tier) on the real kernel: converged, reachable, status, exec, daemon death reported."""

import json
import os
import signal
import time

import pytest

from twin.lab.reach import unreachable_pairs
from twin.lab.status import lab_status

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
    assert result.returncode == 0, result.stderr
    rest = json.loads(result.stdout)["idle"]
    assert {"bfdd", "bgpd", "zebra"} <= set(rest["by_program"])
    # mini at rest is 0.02 of a core: 0 ticks of 10 ms in a 1 s window happen (CI); bench/lab_lifecycle.py
    # measures the figure over 20 s
    assert 0 <= rest["cores"] < rest["machine_cores"] and rest["cores"] <= rest["machine_busy_cores"] + 0.2
    assert 5 < rest["switch_memory_mib"] < 200
    text = twin_cli("lab", "status", mini.fabric.name, "--idle-window", "1").stdout
    assert "at rest (1 s): the lab's processes" in text


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
