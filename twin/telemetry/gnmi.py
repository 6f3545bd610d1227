"""gNMI (0.8) on localhost: what an operator's collector (gnmic, SONiC telemetry clients, pygnmi)
asks a switch, answered for every node of a lab from the telemetry sampler and FRR.

- Capabilities: the models of openconfig.py, JSON, JSON_IETF and PROTO encodings (every leaf is
  sent as a scalar, which all three carry).
- Get: the leaves under the request's paths, one notification per node.
- Subscribe: ONCE, POLL, and STREAM with SAMPLE, ON_CHANGE or TARGET_DEFINED (counters are
  sampled, session states sent on change), `updates_only` and `suppress_redundant`.
- Set: refused; faults go through `twin fault`, which keeps them reversible.

The gNMI `target` (in the prefix) names the node; without one a request covers every node, and
each notification's prefix names its node. Counters are as fresh as the sampler's last read
(`twin telemetry --interval-ms`): a SAMPLE interval below its period is refused. BGP session
states come from routing_state.py (once a second, from the first request that could name them).
The messages are the published gNMI protos, as pygnmi ships them compiled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent import futures
from functools import lru_cache

import grpc
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from twin.errors import TwinError
from twin.lab.handle import Lab
from twin.telemetry import openconfig
from twin.telemetry.openconfig import Path
from twin.telemetry.routing_state import RoutingState
from twin.telemetry.sampler import Sampler

GNMI_VERSION = "0.8.0"
ENCODINGS = (gnmi_pb2.JSON, gnmi_pb2.JSON_IETF, gnmi_pb2.PROTO)
FIRST_SAMPLE_S = 10.0  # how long a request waits for the sampler's first read
WORKERS = 32  # concurrent RPCs: each stream holds a thread (a collector may open one per node)


class LabSource:
    """The leaves of every node: counters from a running Sampler, BGP states from RoutingState."""

    def __init__(self, lab: Lab, sampler: Sampler, routing: RoutingState):
        self.lab, self.sampler, self.routing = lab, sampler, routing
        self.nodes = sorted(lab.fabric.nodes)
        self.period_s = sampler.period

    def want_bgp(self, wait_s: float) -> None:
        self.routing.want(wait_s)

    def snapshot(self) -> tuple[int, dict[str, dict[Path, object]]] | None:
        """(time in ns since the epoch, node -> leaf -> value); None before the first read."""
        snap = self.sampler.latest
        if snap is None:
            return None
        leaves: dict[str, dict[Path, object]] = {node: {} for node in self.nodes}
        for node, mine in openconfig.interface_leaves(snap.interfaces).items():
            leaves.setdefault(node, {}).update(mine)
        peers = {name: status.bgp_addresses for name, status in self.routing.latest.items()}
        for node, mine in openconfig.bgp_leaves(peers).items():
            leaves.setdefault(node, {}).update(mine)
        return time.time_ns() - int((time.monotonic() - snap.t) * 1e9), leaves


def _path(*parts: gnmi_pb2.Path) -> Path:
    """Prefix and path, joined, as openconfig.Path."""
    return tuple(openconfig.elem(e.name, **dict(e.key)) for part in parts for e in part.elem)


@lru_cache(maxsize=1 << 16)
def _proto_path(path: Path) -> gnmi_pb2.Path:
    """Made once per leaf (a stream sends the same leaves every tick); never changed after: a
    message that takes it copies it."""
    return gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name=name, key=dict(keys)) for name, keys in path])


def _value(value: object) -> gnmi_pb2.TypedValue:
    if isinstance(value, int):  # a queue's occupancy can dip below 0 for an instant (counted at two hooks)
        return gnmi_pb2.TypedValue(uint_val=value) if value >= 0 else gnmi_pb2.TypedValue(int_val=value)
    return gnmi_pb2.TypedValue(string_val=str(value))


def _notifications(stamp: int, leaves: dict[str, dict[Path, object]]) -> list[gnmi_pb2.Notification]:
    return [gnmi_pb2.Notification(timestamp=stamp, prefix=gnmi_pb2.Path(target=node),
                                  update=[gnmi_pb2.Update(path=_proto_path(path), val=_value(value))
                                          for path, value in mine.items()])
            for node, mine in sorted(leaves.items()) if mine]


class Service(gnmi_pb2_grpc.gNMIServicer):
    def __init__(self, source: LabSource):
        self.source = source

    def Capabilities(self, request, context):
        return gnmi_pb2.CapabilityResponse(
            supported_models=[gnmi_pb2.ModelData(name=n, organization=o, version=v) for n, o, v in openconfig.MODELS],
            supported_encodings=list(ENCODINGS), gNMI_version=GNMI_VERSION)

    def Get(self, request, context):
        self._check_encoding(request.encoding, context)
        nodes = self._nodes(request.prefix.target, context)
        patterns = [_path(request.prefix, path) for path in request.path] or [()]
        stamp, leaves = self._snapshot(patterns, context)
        chosen = {node: openconfig.select(leaves.get(node, {}), patterns) for node in nodes}
        if not any(chosen.values()):
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"no leaf under {', '.join(openconfig.text(p) for p in patterns)} on "
                          f"{request.prefix.target or 'any node'} (paths: docs/guide/workloads.md, gNMI)")
        return gnmi_pb2.GetResponse(notification=_notifications(stamp, chosen))

    def Set(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "the twin's telemetry is read-only: change a lab with `twin fault`")

    def Subscribe(self, request_iterator, context):
        first = next(request_iterator, None)
        if first is None or not first.HasField("subscribe"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first SubscribeRequest must carry a SubscriptionList")
        subscriptions = first.subscribe
        self._check_encoding(subscriptions.encoding, context)
        nodes = self._nodes(subscriptions.prefix.target, context)
        wanted = [(_path(subscriptions.prefix, s.path), s) for s in subscriptions.subscription] or \
            [((), gnmi_pb2.Subscription())]
        patterns = [pattern for pattern, _ in wanted]

        def chosen(leaves, these=patterns):
            return {node: openconfig.select(leaves.get(node, {}), these) for node in nodes}

        mode = subscriptions.mode
        if mode == gnmi_pb2.SubscriptionList.STREAM:
            yield from self._stream(wanted, nodes, subscriptions.updates_only, context)
            return
        stamp, leaves = self._snapshot(patterns, context)
        yield from (gnmi_pb2.SubscribeResponse(update=n) for n in _notifications(stamp, chosen(leaves)))
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        if mode == gnmi_pb2.SubscriptionList.POLL:
            for request in request_iterator:
                if request.HasField("poll"):
                    stamp, leaves = self._snapshot(patterns, context)
                    yield from (gnmi_pb2.SubscribeResponse(update=n) for n in _notifications(stamp, chosen(leaves)))
                    yield gnmi_pb2.SubscribeResponse(sync_response=True)

    def _stream(self, wanted, nodes, updates_only: bool, context) -> Iterator[gnmi_pb2.SubscribeResponse]:
        """STREAM: each subscription on its own clock (SAMPLE) or checked at every sampler read
        (ON_CHANGE); what TARGET_DEFINED means is decided per leaf: counters sampled, states on change."""
        period = self.source.period_s
        plans = []
        for pattern, subscription in wanted:
            interval = subscription.sample_interval / 1e9 or period
            if subscription.mode == gnmi_pb2.SAMPLE and interval < period * 0.999:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"sample_interval {subscription.sample_interval} ns is below the lab's sampling period "
                              f"({period * 1000:g} ms): ask for {int(period * 1e9)} ns or more, or start "
                              "`twin telemetry --gnmi` with a shorter --interval-ms")
            plans.append(_Plan(pattern, subscription.mode, interval, subscription.suppress_redundant))
        stamp, leaves = self._snapshot([p.pattern for p in plans], context)
        now = time.monotonic()
        first = {node: {} for node in nodes}
        for plan in plans:
            plan.start(now, {node: openconfig.select(leaves.get(node, {}), [plan.pattern]) for node in nodes})
            for node, mine in plan.last.items():
                first[node].update(mine)
        if not updates_only:
            yield from (gnmi_pb2.SubscribeResponse(update=n) for n in _notifications(stamp, first))
        yield gnmi_pb2.SubscribeResponse(sync_response=True)
        while context.is_active():
            time.sleep(max(0.0, min(plan.due(period) for plan in plans) - time.monotonic()))
            if not context.is_active():
                return
            stamp, leaves = self._snapshot([p.pattern for p in plans], context)
            now = time.monotonic()
            out: dict[str, dict[Path, object]] = {node: {} for node in nodes}
            for plan in plans:
                for node, mine in plan.updates(now, period, {node: openconfig.select(leaves.get(node, {}),
                                                                                    [plan.pattern])
                                                             for node in nodes}).items():
                    out[node].update(mine)
            yield from (gnmi_pb2.SubscribeResponse(update=n) for n in _notifications(stamp, out))

    def _snapshot(self, patterns, context) -> tuple[int, dict]:
        if any(openconfig.names_bgp(p) for p in patterns):
            self.source.want_bgp(FIRST_SAMPLE_S)
        deadline = time.monotonic() + FIRST_SAMPLE_S
        while (taken := self.source.snapshot()) is None:
            if time.monotonic() > deadline or not context.is_active():
                context.abort(grpc.StatusCode.UNAVAILABLE, "the lab's counters have not been read yet")
            time.sleep(0.05)
        return taken

    def _nodes(self, target: str, context) -> list[str]:
        if not target:
            return self.source.nodes
        if target not in self.source.nodes:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no node {target!r} in lab {self.source.lab.name}: a target "
                                                     f"is a node name, e.g. {self.source.nodes[0]}")
        return [target]

    @staticmethod
    def _check_encoding(encoding: int, context) -> None:
        if encoding not in ENCODINGS:
            names = ", ".join(gnmi_pb2.Encoding.Name(e) for e in ENCODINGS)
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          f"encoding {gnmi_pb2.Encoding.Name(encoding)} is not served: ask for one of {names}")


class _Plan:
    """One STREAM subscription: when it next sends, and what it sent last."""

    def __init__(self, pattern: Path, mode: int, interval_s: float, suppress_redundant: bool):
        self.pattern, self.mode, self.interval, self.suppress = pattern, mode, interval_s, suppress_redundant
        self.last: dict[str, dict[Path, object]] = {}
        self.next_at = 0.0

    def start(self, now: float, leaves: dict[str, dict[Path, object]]) -> None:
        self.last, self.next_at = leaves, now + self.interval

    def due(self, period: float) -> float:
        return self.next_at if self.mode == gnmi_pb2.SAMPLE else time.monotonic() + period

    def updates(self, now: float, period: float, leaves: dict[str, dict[Path, object]]) -> dict:
        """The leaves to send now: when a sample is due, every sampled leaf (or only the changed
        ones, suppressing redundant values); at any read, every leaf sent on change that changed."""
        out: dict[str, dict[Path, object]] = {}
        sample_due = now >= self.next_at - period * 0.05
        if sample_due:
            self.next_at = max(self.next_at + self.interval, now)
        for node, mine in leaves.items():
            sent = self.last.setdefault(node, {})
            for path, value in mine.items():
                changed = sent.get(path) != value
                if self._on_change(value):
                    send = changed
                else:
                    send = sample_due and (changed or not self.suppress)
                if send:
                    out.setdefault(node, {})[path] = sent[path] = value
        return out

    def _on_change(self, value: object) -> bool:
        return self.mode == gnmi_pb2.ON_CHANGE or (self.mode == gnmi_pb2.TARGET_DEFINED and isinstance(value, str))


def serve(source: LabSource, port: int) -> tuple[grpc.Server, int]:
    """Start the gNMI server on 127.0.0.1:`port` (0: any free port; insecure: localhost only, as
    --serve's page). Returns the server and its port."""
    # no SO_REUSEPORT (gRPC's default): a second server on a taken port must fail, not share it
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="gnmi"),
                         options=[("grpc.so_reuseport", 0)])
    gnmi_pb2_grpc.add_gNMIServicer_to_server(Service(source), server)
    try:
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
    except RuntimeError:  # grpcio raises where older versions returned 0
        bound = 0
    if bound == 0:
        raise TwinError(f"cannot listen on 127.0.0.1:{port} for gNMI",
                        hint="another process holds it: pick --gnmi-port")
    server.start()
    return server, bound
