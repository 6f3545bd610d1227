"""A lab's counters and sessions as OpenConfig leaves, per node (the gNMI server's data; pure).

A leaf is a path (a tuple of elements: name and sorted keys) and a value. The paths are
OpenConfig's where OpenConfig has the leaf:
- /interfaces/interface[name]/state/counters/{in,out}-{octets,pkts,discards,errors}, in-fcs-errors
  (openconfig-interfaces; the kernel's /proc/net/dev and the ports' frame check), and
  /interfaces/interface[name]/state/oper-status, UP or DOWN (the kernel's IFF_RUNNING);
- /qos/interfaces/interface[interface-id]/output/queues/queue[name=data]/state/dropped-pkts
  (openconfig-qos; the port's root qdisc);
- /network-instances/network-instance[name=default]/protocols/protocol[identifier=BGP][name=BGP]
  /bgp/neighbors/neighbor[neighbor-address]/state/session-state (openconfig-network-instance, FRR's
  `show bgp summary json`).
OpenConfig has no PFC or ECN counters; like the vendors (SONiC's own tables, Arista's qos
augments), the twin adds them to the queue's state as model `fabric-twin-qos`: pfc-rx-pause,
pfc-tx-pause, pfc-paused-ms, queue-octets, ecn-marked-pkts, steered-in-pkts.

Paths are matched as gNMI asks: a request names a leaf or a container above leaves; an element's
name or key value may be `*`, and `...` matches any number of elements.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

Elem = tuple[str, tuple[tuple[str, str], ...]]  # name, sorted (key, value) pairs
Path = tuple[Elem, ...]

MODELS = (("openconfig-interfaces", "OpenConfig working group", "3.0.0"),
          ("openconfig-qos", "OpenConfig working group", "0.11.0"),
          ("openconfig-network-instance", "OpenConfig working group", "4.0.0"),
          ("fabric-twin-qos", "fabric-twin", "1.0.0"))

INTERFACE_COUNTERS = {"in-octets": "rx_bytes", "in-pkts": "rx_packets", "in-discards": "rx_dropped",
                      "in-errors": "rx_errors", "in-fcs-errors": "rx_crc_errors", "out-octets": "tx_bytes",
                      "out-pkts": "tx_packets", "out-discards": "tx_dropped", "out-errors": "tx_errors"}
QUEUE_STATE = {"dropped-pkts": "qdisc_drops", "queue-octets": "pfc_queue_bytes", "pfc-rx-pause": "pfc_rx_pause",
               "pfc-tx-pause": "pfc_tx_pause", "pfc-paused-ms": "pfc_paused_ms", "ecn-marked-pkts": "ecn_marked",
               "steered-in-pkts": "steered_in"}
DATA_QUEUE = "data"  # the port's lossless data class (model/queue_tree.py); control traffic has its own
# FRR's neighbour states, as OpenConfig spells them (openconfig-bgp-types, session-state)
SESSION_STATES = {"Idle": "IDLE", "Connect": "CONNECT", "Active": "ACTIVE", "OpenSent": "OPENSENT",
                  "OpenConfirm": "OPENCONFIRM", "Established": "ESTABLISHED"}
BGP_NEIGHBORS: Path = (("network-instances", ()), ("network-instance", (("name", "default"),)),
                       ("protocols", ()), ("protocol", (("identifier", "BGP"), ("name", "BGP"))),
                       ("bgp", ()), ("neighbors", ()))


def elem(name: str, /, **keys: str) -> Elem:
    return name, tuple(sorted(keys.items()))


def interface_leaves(interfaces: Mapping[tuple[str, str], Mapping[str, int]]) -> dict[str, dict[Path, object]]:
    """node -> leaf -> value, from a counter snapshot's (node, ifname) -> field -> value."""
    leaves: dict[str, dict[Path, object]] = {}
    for (node, ifname), values in interfaces.items():
        mine = leaves.setdefault(node, {})
        oper_status, fields = _interface_paths(ifname)
        if "oper_up" in values:
            mine[oper_status] = "UP" if values["oper_up"] else "DOWN"
        for field, path in fields:
            if field in values:
                mine[path] = int(values[field])
    return leaves


@lru_cache(maxsize=1 << 16)
def _interface_paths(ifname: str) -> tuple[Path, tuple[tuple[str, Path], ...]]:
    """A port's oper-status path and its (counter field, path) pairs: made once per port name, not
    on every sample (4,480 leaves a tick on rail8 spent most of a gNMI stream's time in elem())."""
    state = (elem("interfaces"), elem("interface", name=ifname), elem("state"))
    counters = (*state, elem("counters"))
    queue = (elem("qos"), elem("interfaces"), elem("interface", **{"interface-id": ifname}), elem("output"),
             elem("queues"), elem("queue", name=DATA_QUEUE), elem("state"))
    return ((*state, elem("oper-status")),
            tuple((field, (*counters, elem(leaf))) for leaf, field in INTERFACE_COUNTERS.items())
            + tuple((field, (*queue, elem(leaf))) for leaf, field in QUEUE_STATE.items()))


def bgp_leaves(peers: Mapping[str, Mapping[str, str]]) -> dict[str, dict[Path, str]]:
    """node -> leaf -> value, from each switch's peers (address -> FRR's `state`)."""
    leaves: dict[str, dict[Path, str]] = {}
    for node, states in peers.items():
        mine = leaves.setdefault(node, {})
        for address, state in states.items():
            path = (*BGP_NEIGHBORS, elem("neighbor", **{"neighbor-address": address}), elem("state"),
                    elem("session-state"))
            mine[path] = SESSION_STATES.get(state, state.upper())
    return leaves


def matches(pattern: Path, path: Path) -> bool:
    """True if `path` is the leaf `pattern` names or lies below it (wildcards as gNMI has them)."""
    if not pattern:
        return True
    (name, keys), rest = pattern[0], pattern[1:]
    if name == "...":
        return any(matches(rest, path[i:]) for i in range(len(path) + 1))
    if not path:
        return False
    here_name, here_keys = path[0]
    if name not in ("*", here_name):
        return False
    have = dict(here_keys)
    if any(value != "*" and have.get(key) != value for key, value in keys):
        return False
    return matches(rest, path[1:])


_SELECTED: dict[tuple, list[Path]] = {}  # (patterns, a node's paths) -> the paths they name
SELECTED_KEPT = 4096


def select(leaves: Mapping[Path, object], patterns: Iterable[Path]) -> dict[Path, object]:
    """The leaves any pattern names, in path order. A node's paths stay the same from one sample
    to the next, so which of them a request names is worked out once (matching every leaf on
    every sample took 15 ms a tick on rail8's 4,480 leaves)."""
    key = (tuple(patterns), tuple(leaves))
    paths = _SELECTED.get(key)
    if paths is None:
        if len(_SELECTED) >= SELECTED_KEPT:
            _SELECTED.clear()
        paths = _SELECTED[key] = [path for path in sorted(leaves) if any(matches(p, path) for p in key[0])]
    return {path: leaves[path] for path in paths}


def names_bgp(pattern: Path) -> bool:
    """True if a request could name a BGP leaf (so the server starts reading the switches' BGP)."""
    return not pattern or pattern[0][0] in ("*", "...", BGP_NEIGHBORS[0][0])


def text(path: Path) -> str:
    """A path as gNMI's string form: /a/b[k=v]/c."""
    return "/" + "/".join(name + "".join(f"[{k}={v}]" for k, v in keys) for name, keys in path)
