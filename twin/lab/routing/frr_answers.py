"""How the twin judges what FRR answers: pure functions over the JSON of the show commands it asks
(frr.py and converge.py ask; these judge), unit tested on answers captured from a real lab
(tests/data/frr/)."""

from __future__ import annotations

from ipaddress import IPv4Network


def bgp_peers(summary: dict) -> dict | None:
    """Peer address -> its row, from `show bgp summary json`; None while bgpd cannot say."""
    try:
        return summary["ipv4Unicast"]["peers"]
    except (KeyError, TypeError):
        return None


def heard(peer: dict) -> tuple:
    """What changes each time a session hears from its peer: messages read, connections made."""
    return peer.get("msgRcvd"), peer.get("connectionsEstablished")


def established(peer: dict, heard_since: tuple | None = None) -> bool:
    """The session is up; with `heard_since` (heard() taken earlier), it has also heard from its peer
    since then (a session that was reset and came back, not one that never noticed)."""
    return peer.get("state") == "Established" and (heard_since is None or heard(peer) != heard_since)


def all_established(peers: dict | None) -> bool:
    """Every session of a switch is up (and it has some)."""
    return bool(peers) and all(established(peer) for peer in peers.values())


def knows_prefix(answer: dict) -> bool:
    """`show bgp ipv4 unicast <prefix> json` has a path to it (bgpd has learnt that route)."""
    return bool(answer.get("paths"))


def installed_next_hops(routes: dict) -> dict[IPv4Network, int]:
    """prefix -> next hops in the kernel's FIB, from `show ip route json`: the selected route's
    next hops that zebra installed."""
    installed = {}
    for prefix, entries in routes.items():
        for entry in entries:
            if entry.get("selected") and entry.get("installed"):
                installed[IPv4Network(prefix)] = sum(1 for hop in entry.get("nexthops", []) if hop.get("fib"))
    return installed


def bfd_counts(peers: list | None) -> tuple[int, int]:
    """(sessions up, sessions known), from `show bfd peers json`."""
    peers = peers or []
    return sum(1 for peer in peers if peer.get("status") == "up"), len(peers)
