#!/usr/bin/env python3
"""An operator's collector as a detector: it reads the twin over gNMI only, as it reads switches.
It starts the twin's gNMI server (`twin telemetry LAB --gnmi`), subscribes to every node's
interfaces' oper-status ON_CHANGE, and names the link whose port went DOWN. gRPC and the gNMI
protos come from the project's environment (grpcio, pygnmi), hence its python. Starting the server
and subscribing takes a second or two (more on a busy machine), so it says `{"ready": true}` once
its subscription has its first full picture (gNMI's sync_response), and the run waits for that:

    detectors:
      - command: [".venv/bin/python", "examples/detectors/gnmi_link_state.py", "{lab}"]
        ready_within_s: 60
"""

import json
import os
import signal
import socket
import subprocess
import sys

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

SERVER_STOP_S = 2.0

lab = sys.argv[1]
with open(os.environ["FABRIC_TWIN_TOPOLOGY"]) as maps:
    links = json.load(maps)["links"]  # name, a, a_if, b, b_if
port_link = ({(link["a"], link["a_if"]): link["name"] for link in links}
             | {(link["b"], link["b_if"]): link["name"] for link in links})
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
# started before any gRPC channel exists: a process forked beside gRPC's threads can crash
server = subprocess.Popen([sys.executable, "-c", "from twin.cli import main; main()", "telemetry", lab, "--gnmi",
                           "--gnmi-port", str(port), "--interval-ms", "50"],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def stop(*_args):
    raise SystemExit(0)


signal.signal(signal.SIGTERM, stop)
oper_status = gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=name) for name in
                                  ("interfaces", "interface", "state", "oper-status")])
request = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
    mode=gnmi_pb2.SubscriptionList.STREAM, encoding=gnmi_pb2.JSON_IETF,
    subscription=[gnmi_pb2.Subscription(path=oper_status, mode=gnmi_pb2.ON_CHANGE)]))
try:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        named = set()
        for response in gnmi_pb2_grpc.gNMIStub(channel).Subscribe(iter([request])):
            if response.sync_response:  # every port's state seen once: watching
                print(json.dumps({"ready": True}), flush=True)
                continue
            node = response.update.prefix.target  # the gNMI target: a node of the lab
            for update in response.update.update:
                link = port_link.get((node, update.path.elem[1].key["name"]))
                if link and update.val.string_val == "DOWN" and link not in named:
                    named.add(link)
                    print(json.dumps({"kind": "link_down", "link": link, "confidence": 1.0}), flush=True)
                elif link and update.val.string_val == "UP":
                    named.discard(link)
finally:
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=SERVER_STOP_S)
    except subprocess.TimeoutExpired:
        server.kill()
