"""Routing events during a run: BGP session and BFD peer transitions (read from each switch's
FRR log every 50 ms; FRR writes whole-second stamps there, so `t` is when the line was read)
and kernel route changes for host prefixes (netlink route notifications of every switch)."""

from __future__ import annotations

import errno
import os
import re
import select
import socket
import struct
import threading

from twin.events import EventLog
from twin.lab.handle import Lab
from twin.lab.kernel.fib import MAIN_TABLE, route_of
from twin.model.ecmp import host_prefixes
from twin.sockopts import SO_RCVBUFFORCE

LOG_LINE = re.compile(r"^(?P<stamp>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)?) (?P<rest>.*)$")
BGP_CHANGE = re.compile(r"%ADJCHANGE: neighbor (?P<peer>\S+?)\((?P<name>[^)]*)\).* (?P<state>Up|Down)")
BFD_CHANGE = re.compile(r"state-change: \[.*peer:(?P<peer>\S+) .*\] (?P<old>\S+) -> (?P<new>\S+)")
RTM_NEWROUTE, RTM_DELROUTE = 24, 25
RTMGRP_IPV4_ROUTE = 0x40
ROUTE_BUFFER = 4 << 20
NETLINK_ROUTE = 0


class RoutingMonitor:
    def __init__(self, lab: Lab, events: EventLog):
        self.lab, self.state, self.fabric, self.events = lab, lab.state, lab.fabric, events
        fabric = lab.fabric
        self.prefixes = {str(prefix) for prefix in host_prefixes(fabric)}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        offsets, sockets = {}, {}
        for node in self.fabric.switches:
            log = str(self.state.node_dir(node.name) / "frr.log")  # a str: read 20 times a second
            offsets[(node.name, log)] = os.stat(log).st_size if os.path.exists(log) else 0
            with self.lab.enter(node.name):
                sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
            # A fibre cut at pod128 moves hundreds of routes on a switch at once: the default
            # buffer overran (ENOBUFS) and the watch died.
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, ROUTE_BUFFER)
            sock.bind((0, RTMGRP_IPV4_ROUTE))
            sockets[sock] = node.name
        for target, arg in ((self._watch_routes, sockets), (self._tail_logs, offsets)):
            thread = threading.Thread(target=target, args=(arg,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)

    def _watch_routes(self, sockets: dict[socket.socket, str]) -> None:
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select(list(sockets), [], [], 0.1)
                for sock in ready:
                    try:
                        data = sock.recv(1 << 16)
                    except OSError as exc:
                        if exc.errno != errno.ENOBUFS:
                            raise
                        # The kernel dropped notifications: routes changed, which ones is lost.
                        self.events.emit("route", node=sockets[sock], prefix=None, op="overrun", next_hops=None)
                        continue
                    self._route_messages(sockets[sock], data)
        finally:
            for sock in sockets:
                sock.close()

    def _route_messages(self, node: str, data: bytes) -> None:
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if kind in (RTM_NEWROUTE, RTM_DELROUTE):
                # Parsed by lab/kernel/fib.py, not pyroute2: its decoder held the runner's interpreter
                # lock for 9 s of a pod128 drill's 75 (py-spy --gil) while a cut moved routes.
                prefix, table, next_hops = route_of(data, offset + 16, offset + length) or (None, 0, 0)
                if prefix in self.prefixes and table == MAIN_TABLE:
                    deleted = kind == RTM_DELROUTE
                    self.events.emit("route", node=node, prefix=prefix, op="del" if deleted else "add",
                                     next_hops=0 if deleted else next_hops)
            offset += ((length + 3) & ~3) or len(data)

    def _tail_logs(self, offsets: dict[tuple[str, str], int]) -> None:
        while not self._stop.wait(0.05):
            for (node, log), offset in offsets.items():
                # A stat before opening: pod128's 416 logs opened and read 20 times a second were
                # 15 % of a core, most of them with nothing new.
                try:
                    if os.stat(log).st_size <= offset:
                        continue
                    with open(log, "rb") as handle:
                        handle.seek(offset)
                        data = handle.read()
                except FileNotFoundError:
                    continue
                complete = data[: data.rfind(b"\n") + 1]
                offsets[(node, log)] = offset + len(complete)
                for line in complete.decode(errors="replace").splitlines():
                    self._parse(node, line)

    def _parse(self, node: str, line: str) -> None:
        match = LOG_LINE.match(line)
        if not match:
            return
        if bgp := BGP_CHANGE.search(match["rest"]):
            self.events.emit("bgp", node=node, peer=bgp["name"] or bgp["peer"],
                             state="up" if bgp["state"] == "Up" else "down", log_time=match["stamp"])
        elif bfd := BFD_CHANGE.search(match["rest"]):
            self.events.emit("bfd", node=node, peer=bfd["peer"], old=bfd["old"], state=bfd["new"],
                             log_time=match["stamp"])

