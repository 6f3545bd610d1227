#!/usr/bin/env python3
"""An operator's detector in a few lines: listen to every switch's link events, as a collector of
switches' link-down traps (or gNMI's on-change subscriptions) does, and name the link whose port
went down. fabric-twin starts it with the lab's node and link maps in its environment and grades
its JSON-lines verdicts on stdout like the built-in detector's.

    detectors:
      - command: ["python3", "examples/detectors/link_state.py"]

Events, not polling: a sweep of `ip link show` in every switch, one process each, took a second
and more on a busy 2-core machine (rail4's 14 switches during a flap drill, 2026-12-02), and the
port went unnoticed for that long; `ip monitor` hears of it within milliseconds.
"""

import ctypes
import json
import os
import re
import selectors
import signal
import subprocess
import time

PR_SET_PDEATHSIG = 1
EVENT = re.compile(r"^(Deleted )?\d+: ([^:@\s]+)(?:@\S+)?: <([^>]*)>", re.M)  # `ip -o monitor link`


def die_with_this_detector() -> None:  # a monitor must not outlive the detector, however it ends
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


with open(os.environ["FABRIC_TWIN_TOPOLOGY"]) as maps:  # also in FABRIC_TWIN_NODES/LINKS on small labs
    topology = json.load(maps)
nodes = topology["nodes"]  # node -> network namespace
links = topology["links"]  # name, a, a_if, b, b_if
start = float(os.environ["FABRIC_TWIN_START_EPOCH"])
port_link = ({(link["a"], link["a_if"]): link["name"] for link in links}
             | {(link["b"], link["b_if"]): link["name"] for link in links})
switches = sorted({node for node, _ in port_link if not node.startswith("host-")})
# A link's ports that are down now. The link is named when its first port goes down and again only
# after all of them were up: each switch has a monitor of its own, so one end's events can arrive
# after the other's (at a clear, the end brought up first reports NO-CARRIER until its peer is up,
# and read after the peer's LOWER_UP it once named a link that was coming back).
down_ports: dict[str, set[tuple[str, str]]] = {}


def port_state(switch: str, ifname: str, flags: list[str]) -> None:
    link = port_link.get((switch, ifname))
    if link is None:
        return
    down = down_ports.setdefault(link, set())
    if "LOWER_UP" in flags:
        down.discard((switch, ifname))
    elif not down:
        down.add((switch, ifname))
        print(json.dumps({"t": round(time.time() - start, 3), "kind": "link_down", "link": link,
                          "confidence": 1.0}), flush=True)
    else:
        down.add((switch, ifname))


selector = selectors.DefaultSelector()
for switch in switches:  # listening first, so that no change falls between the listing and the events
    monitor = subprocess.Popen(["ip", "-o", "-n", nodes[switch], "monitor", "link"], stdout=subprocess.PIPE,
                               preexec_fn=die_with_this_detector)
    selector.register(monitor.stdout, selectors.EVENT_READ, [switch, b""])
for switch in switches:  # a port that was down before the events began
    for port in json.loads(subprocess.run(["ip", "-j", "-n", nodes[switch], "link", "show"],
                                          capture_output=True, text=True).stdout or "[]"):
        port_state(switch, port["ifname"], port.get("flags", []))
while True:
    for key, _mask in selector.select():
        switch, pending = key.data
        chunk = os.read(key.fd, 65536)
        if not chunk:  # its monitor ended: the switch's namespace is gone with the lab
            selector.unregister(key.fileobj)
            continue
        *lines, key.data[1] = (pending + chunk).split(b"\n")
        for deleted, ifname, flags in EVENT.findall(b"\n".join(lines).decode(errors="replace")):
            if not deleted:
                port_state(switch, ifname, flags.split(","))
