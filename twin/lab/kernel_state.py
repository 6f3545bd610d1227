"""A comparable snapshot of everything faults may change on a lab's nodes: nft ruleset,
qdiscs, classes and clsact filters, link admin state and MTU, routes and rules, the sysctls faults set (kernel),
the ports' physical layer (lab/ports/phy.py: the `phy` key, what no command on a node lists) and FRR's
running config and routes. Used to prove that clearing a fault restores the exact prior state."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from pyroute2 import IPRoute

from twin.errors import RuntimeBackendError
from twin.lab import nft
from twin.lab.handle import Lab
from twin.lab.kernel.nsutil import read_sysctl
from twin.lab.pfc.queues import CLSACT_EGRESS, CLSACT_INGRESS, CLSACT_PARENTS
from twin.lab.ports import phy
from twin.lab.routing.frr import CONFIG_BANNER, vtysh_argv, vtysh_json
from twin.model.sysctls import HASH_POLICY_SYSCTL

RTPROT_BGP = 186
CLSACT_HOOKS = {CLSACT_PARENTS[CLSACT_INGRESS]: "ingress", CLSACT_PARENTS[CLSACT_EGRESS]: "egress"}
FAULT_SYSCTLS = (HASH_POLICY_SYSCTL,)  # faults/hash_policy.py
FRR_READERS = 4


def _kernel(ipr: IPRoute) -> dict:
    links = {m.get_attr("IFLA_IFNAME"): (bool(m["flags"] & 1), m.get_attr("IFLA_MTU")) for m in ipr.get_links()}
    names = {m["index"]: m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}
    qdiscs = sorted((names[m["index"]], m.get_attr("TCA_KIND"), m["handle"], m["parent"])
                    for m in ipr.get_qdiscs())
    classes = []
    for m in (c for index in names for c in ipr.get_classes(index=index)):
        params = m.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS") if m.get_attr("TCA_KIND") == "htb" else None
        shaped = (params["rate"], params["buffer"], params["cbuffer"]) if params else (None, None, None)
        classes.append((names[m["index"]], m["handle"], *shaped))
    clsact = {m["index"] for m in ipr.get_qdiscs() if m.get_attr("TCA_KIND") == "clsact"}
    filters = sorted((names[index], hook, *_filter(m)) for index in clsact for parent, hook in CLSACT_HOOKS.items()
                     for m in ipr.get_filters(index=index, parent=parent) if m["handle"])
    routes = sorted((m.get_attr("RTA_TABLE"), f"{m.get_attr('RTA_DST') or '0.0.0.0'}/{m['dst_len']}",
                     m.get_attr("RTA_GATEWAY") or "", names.get(m.get_attr("RTA_OIF")) or "", m["proto"])
                    for m in ipr.route("dump", family=2) if m["proto"] != RTPROT_BGP)
    rules = sorted((m.get_attr("FRA_PRIORITY") or 0, m.get_attr("FRA_SRC") or "", m.get_attr("FRA_TABLE") or 0)
                   for m in ipr.get_rules(family=2))
    return {"links": links, "qdiscs": qdiscs, "classes": sorted(classes), "filters": filters, "routes": routes,
            "rules": rules}


def _filter(message) -> tuple[int, str, str]:
    """A clsact filter as (priority, kind, program name): the program's id changes with every load."""
    kind = message.get_attr("TCA_KIND")
    options = message.get_attr("TCA_OPTIONS")
    name = options.get_attr("TCA_BPF_NAME") if kind == "bpf" and options is not None else ""
    return message["info"] >> 16, kind, name or ""


def _frr(lab: Lab, node: str) -> dict:
    config = lab.runtime.exec(node, vtysh_argv(lab, node, "show running-config")).stdout
    lines = [line for line in config.splitlines() if line.strip() and not CONFIG_BANNER.match(line)]
    routes = vtysh_json(lab, node, "show ip route json")
    fib = {prefix: sorted(h.get("ip", h.get("interfaceName", "")) for e in entries if e.get("selected")
                          for h in e.get("nexthops", []) if h.get("fib"))
           for prefix, entries in routes.items()}
    return {"running_config": lines, "fib": fib}


def _frr_or_silence(lab: Lab, node: str) -> dict:
    try:
        return _frr(lab, node)
    except RuntimeBackendError as exc:  # a switch whose daemons a fault stopped: that is its state
        return {"running_config": f"not answering: {exc}", "fib": {}}


def take(lab: Lab) -> dict:
    snap = {}
    receive_faults, blackholes, crossed = phy.faults(lab), phy.blackholes(lab), phy.crossed(lab)
    # Asking FRR is two vtysh processes a switch, waited on: a few threads overlap them (the
    # netlink dumps below decode in Python, which threads would not speed up).
    switches = [node.name for node in lab.fabric.local_switches]
    with ThreadPoolExecutor(max_workers=FRR_READERS) as pool:
        frr = dict(zip(switches, pool.map(lambda name: _frr_or_silence(lab, name), switches)))
    for name in sorted(node.name for node in lab.fabric.local_nodes):
        with lab.netlink(name) as ipr:
            entry = _kernel(ipr)
        entry["sysctls"] = {key: read_sysctl(lab.netns(name), key) for key in FAULT_SYSCTLS}
        entry["nft"] = [o for o in nft.ruleset(lab.runtime, name)]
        for obj in entry["nft"]:  # handles are renumbered when tables come and go
            next(iter(obj.values())).pop("handle", None)
        entry["phy"] = {port.ifname: fault for port, fault in receive_faults.items() if port.node == name}
        if name in blackholes:
            entry["phy"]["blackholes"] = blackholes[name]
        if name in crossed:
            entry["phy"]["crossed"] = crossed[name]
        entry |= frr.get(name, {})
        snap[name] = json.loads(json.dumps(entry, default=str))
    return snap


def differences(before: dict, after: dict) -> list[str]:
    """Human-readable list of what differs ('' when identical)."""
    found = []
    for node in sorted(set(before) | set(after)):
        for key in sorted(set(before.get(node, {})) | set(after.get(node, {}))):
            old, new = before.get(node, {}).get(key), after.get(node, {}).get(key)
            if old != new:
                found.append(f"{node} {key}: {str(old)[:200]} -> {str(new)[:200]}")
    return found
