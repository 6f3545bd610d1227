"""The judges of FRR's answers (lab/routing/frr_answers.py) on answers captured from a real mini lab
(tests/data/frr/: leaf-g1-r1, healthy, and three seconds after `neighbor 10.0.0.0 shutdown`, its
session to spine-1)."""

import json
from pathlib import Path

from test_model import fabric_of

from twin.lab.routing.frr_answers import (
    all_established,
    bfd_counts,
    bgp_peers,
    established,
    heard,
    installed_next_hops,
    knows_prefix,
)
from twin.model.ecmp import expected_next_hops

DATA = Path(__file__).parent.parent / "data" / "frr"
NODE, SHUT_PEER, OTHER_PEER = "leaf-g1-r1", "10.0.0.0", "10.0.0.2"


def answer(state: str, command: str):
    return json.loads((DATA / state / f"{command}.json").read_text())


def test_a_healthy_leaf_has_every_ecmp_next_hop_the_model_expects():
    expected = expected_next_hops(fabric_of("mini"))[NODE]
    installed = installed_next_hops(answer("healthy", "ip-route"))
    assert expected and {prefix: installed.get(prefix, 0) for prefix in expected} == expected


def test_a_shut_session_halves_the_uplink_routes_and_is_not_established():
    expected = expected_next_hops(fabric_of("mini"))[NODE]
    installed = installed_next_hops(answer("one-session-shut", "ip-route"))
    short = {prefix for prefix, want in expected.items() if installed.get(prefix, 0) != want}
    assert short and all(installed.get(prefix) == expected[prefix] - 1 for prefix in short)
    peers = bgp_peers(answer("one-session-shut", "bgp-summary"))
    assert not established(peers[SHUT_PEER]) and established(peers[OTHER_PEER])
    assert not all_established(peers) and all_established(bgp_peers(answer("healthy", "bgp-summary")))


def test_a_session_counts_as_back_only_once_it_has_heard_from_its_peer_since():
    peer = bgp_peers(answer("healthy", "bgp-summary"))[OTHER_PEER]
    assert established(peer) and not established(peer, heard_since=heard(peer))
    assert established(peer, heard_since=(peer["msgRcvd"] - 1, peer["connectionsEstablished"]))


def test_bgpd_that_cannot_say_is_no_answer_and_no_session():
    assert bgp_peers({}) is None and bgp_peers({"ipv4Unicast": {}}) is None
    assert not all_established(None) and not all_established({})


def test_bfd_sessions_and_the_loopback_route():
    up, known = bfd_counts(answer("healthy", "bfd-peers"))
    assert up == known == 2
    assert bfd_counts(None) == (0, 0) and bfd_counts([{"status": "down"}, {"status": "up"}]) == (1, 2)
    assert knows_prefix(answer("healthy", "bgp-loopback")) and not knows_prefix({})
