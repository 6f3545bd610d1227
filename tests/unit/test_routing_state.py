"""The telemetry servers' routing reader: a switch whose BGP sessions are between Down and Up is
read again every UNSETTLED_EVERY_S (no log line announces Connect or Active), a settled one only
at the full read."""

import time
from types import SimpleNamespace

from twin.lab.files import open_lab
from twin.lab.status import SwitchStatus
from twin.telemetry import routing_state


class QuietMonitor:
    """No FRR log, no kernel routes: only the reader's own clock reads a switch."""

    def __init__(self, *args, **kwargs):
        pass

    def start(self):
        pass

    def stop(self):
        pass


def test_a_switch_between_down_and_up_is_read_until_it_settles(monkeypatch):
    _, fabric = open_lab("mini")
    reads: dict[str, int] = {}
    states = {"leaf-g1-r1": iter(["Active", "Connect", "Active", "OpenSent"])}

    def status(lab, name, expected):
        reads[name] = reads.get(name, 0) + 1
        state = next(states.get(name, iter(())), "Established")
        return SwitchStatus(name=name, daemons={"bgpd": True}, bgp={"spine-1": state})

    monkeypatch.setattr(routing_state, "RoutingMonitor", QuietMonitor)
    monkeypatch.setattr(routing_state, "switch_status", status)
    reader = routing_state.RoutingState(SimpleNamespace(fabric=fabric), full_every_s=60)
    try:
        reader.want(5)
        deadline = time.monotonic() + 10
        while reader.latest["leaf-g1-r1"].bgp["spine-1"] != "Established":
            assert time.monotonic() < deadline, reads
            time.sleep(0.05)
    finally:
        reader.stop()
    # Active, Connect, Active, OpenSent, then Established: five reads, four of them its own
    assert reads["leaf-g1-r1"] == 5, reads
    assert {name: n for name, n in reads.items() if name != "leaf-g1-r1"} == dict.fromkeys(
        [n.name for n in fabric.switches if n.name != "leaf-g1-r1"], 1)
