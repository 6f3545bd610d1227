"""Benchmark: `twin telemetry --gnmi` as an operator's collector sees it (issue 35).

    python bench/gnmi.py --lab rail8 --seconds 60 --out docs/benchmarks.md

A copy of the lab; `twin telemetry --gnmi --out metrics.jsonl` at --interval-ms; one gNMI client
(gRPC and the published gNMI protos) subscribes to every port's in-octets on every node, SAMPLE at
the sampling period, and to every switch's BGP session states ON_CHANGE. Reported:
- the delivered period per node (gaps between the notifications of one node, as received), mean,
  p99 and max over all nodes;
- values: every in-octets value received, compared with the same port's rx_bytes in the samples
  metrics.jsonl holds (the same sampler writes both: equal, or the server lost or mixed samples);
- BGP: at half time one leaf-spine link goes down (both ends) and comes back 5 s later; a thread
  reads the leaf's bgpd every 50 ms; the delay from bgpd's state change to the gNMI update.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).parent))
import grpc  # noqa: E402
from lab_copy import lab_copy  # noqa: E402
from lab_lifecycle import machine  # noqa: E402
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc  # noqa: E402
from sections import emit  # noqa: E402

from twin.lab import deploy  # noqa: E402
from twin.lab.files import open_lab  # noqa: E402
from twin.lab.routing import frr  # noqa: E402

BEGIN, END = "<!-- gnmi:begin -->", "<!-- gnmi:end -->"
ROOT = Path(__file__).resolve().parents[1]
BGP = ["network-instances", "network-instance", "protocols", "protocol", "bgp", "neighbors"]


def elems(names: list[str]) -> gnmi_pb2.Path:
    return gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=n) for n in names])


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Collector:
    """One STREAM subscription over every node; what arrived, when."""

    def __init__(self, port: int, interval_ms: int):
        # node -> (receive time, the server's timestamp in ns) of each of its sampled notifications
        self.arrivals: dict[str, list[tuple[float, int]]] = {}
        self.values: list[tuple[str, str, int]] = []  # node, ifname, in-octets
        self.sessions: list[tuple[float, str, str, str]] = []  # received, node, address, state
        self.synced = threading.Event()
        request = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
            mode=gnmi_pb2.SubscriptionList.STREAM, encoding=gnmi_pb2.JSON_IETF, updates_only=False,
            subscription=[gnmi_pb2.Subscription(path=elems(["interfaces", "interface", "state", "counters",
                                                            "in-octets"]),
                                                mode=gnmi_pb2.SAMPLE, sample_interval=interval_ms * 1_000_000),
                          gnmi_pb2.Subscription(path=elems(BGP), mode=gnmi_pb2.ON_CHANGE)]))
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(self._channel).result(timeout=30)
        self._stream = gnmi_pb2_grpc.gNMIStub(self._channel).Subscribe(iter([request]))
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for response in self._stream:
                now = time.monotonic()
                if response.sync_response:
                    self.synced.set()
                    continue
                note = response.update
                node, sampled = note.prefix.target, False
                for update in note.update:
                    names = [e.name for e in update.path.elem]
                    if names[-1] == "in-octets":
                        sampled = True
                        self.values.append((node, update.path.elem[1].key["name"], update.val.uint_val))
                    elif names[-1] == "session-state":
                        address = update.path.elem[6].key["neighbor-address"]
                        self.sessions.append((now, node, address, update.val.string_val))
                if sampled and self.synced.is_set():
                    self.arrivals.setdefault(node, []).append((now, note.timestamp))
        except grpc.RpcError:
            pass  # cancelled at the end

    def close(self) -> None:
        self._stream.cancel()
        self._channel.close()
        self._thread.join(timeout=5)


def twin(*args: str) -> None:
    subprocess.run([sys.executable, "-c", "from twin.cli import main; main()", *args], cwd=ROOT, check=True,
                   capture_output=True)


def watch_bgp(lab, switch: str, stop: threading.Event, changes: list) -> None:
    """bgpd's own view every 50 ms: (time, address, state) at every change."""
    last: dict[str, str] = {}
    while not stop.is_set():
        peers = frr.vtysh_json(lab, switch, "show bgp summary json")["ipv4Unicast"]["peers"]
        now = time.monotonic()
        for address, peer in peers.items():
            if last.get(address) != peer["state"]:
                if address in last:
                    changes.append((now, address, peer["state"]))
                last[address] = peer["state"]
        stop.wait(0.05)


def metrics_values(path: Path) -> dict[tuple[str, str], set[int]]:
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    keys = [tuple(k.split(":", 1)) for k in header["interfaces"]]
    column = header["fields"].index("rx_bytes")
    seen: dict[tuple[str, str], set[int]] = {}
    for line in lines[1:]:
        for key, row in zip(keys, json.loads(line)["v"], strict=True):
            seen.setdefault(key, set()).add(row[column])
    return seen


def run(name: str, seconds: float, interval_ms: int, scratch: Path) -> dict:
    lab_file, fabric = open_lab(str(lab_copy(name, f"gn-{name}", scratch)))
    link = next(lk for lk in fabric.links if lk.kind == "fabric" and "leaf" in (fabric.nodes[lk.a.node].role,
                                                                               fabric.nodes[lk.b.node].role))
    leaf = link.a.node if fabric.nodes[link.a.node].role == "leaf" else link.b.node
    print(f"{name}: up ...", flush=True)
    lab = deploy.up(lab_file, fabric)
    metrics, port = scratch / "metrics.jsonl", free_port()
    stop, changes = threading.Event(), []
    try:
        with open(scratch / "server.log", "w") as log:
            server = subprocess.Popen([sys.executable, "-c", "from twin.cli import main; main()", "telemetry",
                                       fabric.name, "--gnmi", "--gnmi-port", str(port), "--interval-ms",
                                       str(interval_ms), "--out", str(metrics)], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=log)
        try:
            collector = Collector(port, interval_ms)
            collector.synced.wait(30)
            watcher = threading.Thread(target=watch_bgp, args=(lab, leaf, stop, changes), daemon=True)
            watcher.start()
            time.sleep(seconds / 2)
            # through the CLI: the fault engine here would fork pyroute2's netns helper beside this
            # process's gRPC threads, and such a child can crash (grpc's fork support)
            twin("fault", "inject", fabric.name, "link_down", "--link", link.name, "--id", "cut")
            time.sleep(5)
            twin("fault", "clear", fabric.name, "cut")
            time.sleep(seconds / 2 - 5)
            collector.close()
            stop.set()
            watcher.join(timeout=5)
        finally:
            server.send_signal(subprocess.signal.SIGINT)
            server.wait(timeout=20)
    finally:
        stop.set()
        deploy.down(fabric.name)
    # Each gap with the gap in the server's timestamps (the sampler's reads the values are from)
    # beside it, and when it began: a long gap with a short stamp gap was lost in delivery.
    start = min(seen[0][0] for seen in collector.arrivals.values())
    spans = [(b - a, (sb - sa) / 1e9, a - start) for seen in collector.arrivals.values()
             for (a, sa), (b, sb) in itertools.pairwise(seen)]
    gaps = [gap for gap, _, _ in spans]
    print(f"longest arrival gaps (arrival s, stamp s, at s; the link down from {seconds / 2:g} s for 5 s):",
          [(round(gap, 3), round(stamp, 3), round(at, 1)) for gap, stamp, at in sorted(spans, reverse=True)[:10]],
          flush=True)
    stored = metrics_values(metrics)
    equal = sum(1 for node, ifname, value in collector.values if value in stored.get((node, ifname), ()))
    delays = []
    for at, address, state in changes:
        later = [t for t, node, addr, s in collector.sessions
                 if node == leaf and addr == address and s == state.upper() and t >= at - 1]
        delays.append((state, later[0] - at if later else None))
    return {"lab": name, "nodes": len(collector.arrivals), "ports": len({(n, i) for n, i, _ in collector.values}),
            "gaps": gaps, "values": len(collector.values), "equal": equal, "delays": delays, "link": link.name,
            "leaf": leaf}


def render(result: dict, seconds: float, interval_ms: int, command: str) -> list[str]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    gaps = sorted(result["gaps"])
    p99 = gaps[int(0.99 * (len(gaps) - 1))]
    lines = [BEGIN, f"## gNMI telemetry as a collector sees it (issue 35, {now[:10]})", "",
             f"`{command}` on {machine()}, {now}. {result['lab']}: every port's in-octets on every node "
             f"({result['nodes']} nodes, {result['ports']} ports), SAMPLE at {interval_ms} ms, one STREAM "
             f"subscription for {seconds:g} s; BGP session states ON_CHANGE; {result['link']} down for 5 s at half "
             "time.", "",
             "| delivered period per node, mean | p99 | max | values received | equal to metrics.jsonl |",
             "| --- | --- | --- | --- | --- |",
             f"| {statistics.mean(gaps) * 1000:.1f} ms | {p99 * 1000:.1f} ms | {gaps[-1] * 1000:.1f} ms | "
             f"{result['values']:,} | {result['equal']:,} |", "",
             f"BGP on {result['leaf']} (its bgpd read every 50 ms): the delay from the state change there to the "
             "gNMI update.", "", "| change | delay |", "| --- | --- |"]
    for state, delay in result["delays"]:
        lines.append(f"| {state} | {'not sent' if delay is None else f'{delay:.2f} s'} |")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", default="rail8")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval-ms", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.seconds < 12:
        parser.error("--seconds: at least 12 (the link is down for 5 s at half time)")
    with tempfile.TemporaryDirectory(prefix="gnmi-bench.") as scratch:
        result = run(args.lab, args.seconds, args.interval_ms, Path(scratch))
    command = f"python bench/gnmi.py --lab {args.lab} --seconds {args.seconds:g} --interval-ms {args.interval_ms}"
    emit(render(result, args.seconds, args.interval_ms, command), args.out, BEGIN, END)


if __name__ == "__main__":
    main()
