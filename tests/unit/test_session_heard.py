"""wait_established with heard_since: a session that is Established but has read nothing since
the marks (its keepalives lost to a cleared fault, its hold timer still running) is not taken
for converged; one that read a message, or was established again, is."""

import time
from pathlib import Path

import pytest

from twin.errors import RuntimeBackendError
from twin.lab.routing import frr


class Peers:
    """`show bgp summary json` of one switch, changed between calls by the test."""

    def __init__(self, **peer):
        self.peer = {"state": "Established", "msgRcvd": 100, "connectionsEstablished": 1} | peer

    def __call__(self, lab, node, command, timeout=10):
        assert command == "show bgp summary json"
        return {"ipv4Unicast": {"peers": {"10.0.0.1": dict(self.peer)}}}


class State:
    def node_dir(self, node):
        return Path("/nonexistent") / node


class Lab:
    """What the waits take of a lab: its state's folders (for the hint)."""
    state = State()


SESSIONS = {"spine-1": ["10.0.0.1"]}


def test_an_established_session_that_has_read_nothing_since_is_still_waited_for(monkeypatch):
    monkeypatch.setattr(frr, "vtysh_json", Peers())
    marks = frr.session_marks(Lab(), SESSIONS)
    with pytest.raises(RuntimeBackendError, match="did not come up"):
        frr.wait_established(Lab(), SESSIONS, time.monotonic() + 0.3, heard_since=marks)
    frr.wait_established(Lab(), SESSIONS, time.monotonic() + 0.3)  # Established is enough without marks


@pytest.mark.parametrize("change", [{"msgRcvd": 101}, {"connectionsEstablished": 2, "msgRcvd": 3}])
def test_a_session_that_read_a_message_or_came_up_again_counts(monkeypatch, change):
    peers = Peers()
    monkeypatch.setattr(frr, "vtysh_json", peers)
    marks = frr.session_marks(Lab(), SESSIONS)
    peers.peer |= change
    frr.wait_established(Lab(), SESSIONS, time.monotonic() + 0.3, heard_since=marks)


def test_a_session_that_read_a_message_but_is_down_is_waited_for(monkeypatch):
    peers = Peers()
    monkeypatch.setattr(frr, "vtysh_json", peers)
    marks = frr.session_marks(Lab(), SESSIONS)
    peers.peer |= {"msgRcvd": 101, "state": "Idle"}
    with pytest.raises(RuntimeBackendError):
        frr.wait_established(Lab(), SESSIONS, time.monotonic() + 0.3, heard_since=marks)
