#!/usr/bin/env python3
"""An operator's detector in a few lines: watch every switch port's operational state and name
the link whose port went down. fabric-twin starts it with the lab's node and link maps in its
environment and grades its JSON-lines verdicts on stdout like the built-in detector's.

    detectors:
      - command: ["python3", "examples/detectors/link_state.py"]
"""

import json
import os
import subprocess
import sys
import time

with open(os.environ["FABRIC_TWIN_TOPOLOGY"]) as maps:  # also in FABRIC_TWIN_NODES/LINKS on small labs
    topology = json.load(maps)
nodes = topology["nodes"]  # node -> network namespace
links = topology["links"]  # name, a, a_if, b, b_if
start = float(os.environ["FABRIC_TWIN_START_EPOCH"])
port_link = ({(link["a"], link["a_if"]): link["name"] for link in links}
             | {(link["b"], link["b_if"]): link["name"] for link in links})
switches = sorted({node for node, _ in port_link if not node.startswith("host-")})
named = set()
while True:
    for switch in switches:
        ports = json.loads(subprocess.run(["ip", "-j", "-n", nodes[switch], "link", "show"],
                                          capture_output=True, text=True).stdout or "[]")
        for port in ports:
            link = port_link.get((switch, port["ifname"]))
            down = "LOWER_UP" not in port.get("flags", [])
            if link and down and link not in named:
                named.add(link)
                print(json.dumps({"t": round(time.time() - start, 3), "kind": "link_down", "link": link,
                                  "confidence": 1.0}), flush=True)
            elif link and not down:
                named.discard(link)
    time.sleep(0.1)
    sys.stdout.flush()
