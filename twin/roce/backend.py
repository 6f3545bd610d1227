"""`roce`: a torch.distributed backend over the emulated RoCE transport, registered as a
third-party backend, so `init_process_group("roce")` and every torch collective call (the same
calls the gloo jobs make) run over it.

Configured like NCCL, from the environment of the rank process:
    NCCL_IB_TIMEOUT (20), NCCL_IB_RETRY_CNT (7), NCCL_IB_QPS_PER_CONNECTION (1)
    FABRIC_TWIN_ROCE_ADDRESS, _IFNAME, _LABEL (the rank's host NIC), _MTU, _TIME_SCALE (1)
    FABRIC_TWIN_ROCE_CC (dcqcn | none), _LINE_BPS (the NIC's line rate, which DCQCN scales to)
    FABRIC_TWIN_ROCE_MULTIPATH (1: packets reorderable, selective repeat; rc: packets reorderable, RC;
    0 default: RC)
    FABRIC_TWIN_ROCE_PATH_OFFSETS (0: no dodging; N: a QP that loses packets moves to its source
    port's next value modulo N, the fabric's next path offset; nic.py)
    FABRIC_TWIN_ROCE_PORTS ("": one port; "nic1a,nic1b": a dual-port NIC's ports, over which the
    NIC places its QPs in turn, lag.py)
At creation every rank opens its QPs toward every other rank (QPS_PER_CONNECTION each, each its
own UDP source port), publishes their ports in the group's store, and connects to the others'.
A message to a peer is cut into as many parts as QPs (NCCL splits a message over its QPs).
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from twin.roce import algorithms
from twin.roce.dcqcn import DcqcnParams
from twin.roce.nic import CollectiveTimeout, Nic, PeerAborted, multipath_modes
from twin.roce.qp import DEFAULT_IB_TIMEOUT, DEFAULT_RETRY_CNT, Timers, TransportError, ib_timeout_s

NAME = "roce"
ABORT_KEY = "roce/abort"
REDUCTIONS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.MAX: "max", dist.ReduceOp.MIN: "min",
              dist.ReduceOp.PRODUCT: "product"}


def settings() -> dict:
    env = os.environ
    return {"address": env["FABRIC_TWIN_ROCE_ADDRESS"], "ifname": env["FABRIC_TWIN_ROCE_IFNAME"],
            "label": env.get("FABRIC_TWIN_ROCE_LABEL", env["FABRIC_TWIN_ROCE_ADDRESS"]),
            "mtu": int(env.get("FABRIC_TWIN_ROCE_MTU", "9000")),
            "time_scale": float(env.get("FABRIC_TWIN_ROCE_TIME_SCALE", "1")),
            "ib_timeout": int(env.get("NCCL_IB_TIMEOUT", DEFAULT_IB_TIMEOUT)),
            "retry_cnt": int(env.get("NCCL_IB_RETRY_CNT", DEFAULT_RETRY_CNT)),
            "qps": int(env.get("NCCL_IB_QPS_PER_CONNECTION", "1")),
            "cc": env.get("FABRIC_TWIN_ROCE_CC", "none"), "line_bps": float(env.get("FABRIC_TWIN_ROCE_LINE_BPS", "0")),
            "multipath": env.get("FABRIC_TWIN_ROCE_MULTIPATH", "0"),
            "path_offsets": int(env.get("FABRIC_TWIN_ROCE_PATH_OFFSETS", "0")),
            "ports": tuple(port for port in env.get("FABRIC_TWIN_ROCE_PORTS", "").split(",") if port)}


def _done(result) -> dist.Work:
    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


class RoceGroup(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout):
        super().__init__(rank, size)
        self.my_rank = rank
        self.store = store
        config = settings()
        self.qps = config["qps"]
        self.timeout_s = timeout.total_seconds()
        dcqcn = DcqcnParams().for_line_rate(config["line_bps"]) if config["cc"] == "dcqcn" else None
        self.nic = Nic(config["address"], config["ifname"], config["mtu"],
                       Timers(ib_timeout_s(config["ib_timeout"], config["time_scale"]), config["retry_cnt"]),
                       config["label"], dcqcn, **multipath_modes(config["multipath"]),
                       path_offsets=config["path_offsets"], ports=config["ports"])
        ports = {}
        for peer in range(size):
            if peer != rank:
                for lane in range(self.qps):
                    ports[str(self._qpn(peer, lane))] = self.nic.open_qp(self._qpn(peer, lane))
        store.set(f"roce/{rank}", json.dumps({"address": config["address"], "label": config["label"],
                                               "ports": ports}))
        for peer in range(size):
            if peer != rank:
                info = json.loads(store.get(f"roce/{peer}"))
                for lane in range(self.qps):
                    remote = self._qpn_at(peer, rank, lane)
                    self.nic.connect_qp(self._qpn(peer, lane), remote, info["address"], info["ports"][str(remote)],
                                        f"rank {peer} ({info['label']}, {info['address']})")

    def _qpn(self, peer: int, lane: int) -> int:
        return self._qpn_at(self.my_rank, peer, lane)

    def _qpn_at(self, owner: int, peer: int, lane: int) -> int:
        """The number `owner` gives its QP `lane` toward `peer` (peers indexed without owner)."""
        return (peer - (peer > owner)) * self.qps + lane

    # --- the link the algorithms use ------------------------------------------------------------
    def _split(self, view: memoryview) -> list[memoryview]:
        step = -(-len(view) // self.qps) if len(view) else 0
        return [view[i * step:(i + 1) * step] for i in range(self.qps)]

    def post_send(self, peer: int, view: memoryview) -> list:
        return [self.nic.post_send(self._qpn(peer, lane), part) for lane, part in enumerate(self._split(view))]

    def post_recv(self, peer: int, view: memoryview) -> list:
        return [self.nic.post_recv(self._qpn(peer, lane), part) for lane, part in enumerate(self._split(view))]

    def wait(self, requests: list, what: str) -> None:
        """A failing rank tells the group through its store, so the others stop waiting at once
        (UDP has no connection for them to see closed, as gloo's TCP peers do)."""
        try:
            self.nic.wait(requests, self.timeout_s, what, aborted=self._aborted)
        except (TransportError, CollectiveTimeout) as exc:
            try:
                self.store.set(ABORT_KEY, f"rank {self.my_rank} failed: {str(exc)[:200]}")
            except Exception:  # the store gone too: the others time out on their own
                pass
            raise
        except PeerAborted:
            raise

    def _aborted(self) -> str | None:
        try:
            if self.store.check([ABORT_KEY]):
                return self.store.get(ABORT_KEY).decode()
        except Exception:  # a store that cannot be read says nothing
            return None
        return None

    # --- torch.distributed ------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return NAME

    def allreduce(self, tensors, opts=None):
        op = REDUCTIONS[opts.reduceOp.op] if opts is not None else "sum"
        for tensor in tensors:
            algorithms.allreduce(self, tensor, op)
        return _done(tensors)

    def broadcast(self, tensors, opts):
        for tensor in tensors:
            algorithms.broadcast(self, tensor, opts.rootRank)
        return _done(tensors)

    def all_gather_single(self, output, input_, opts=None):
        algorithms.allgather(self, output, input_)
        return _done([output])

    def reduce_scatter_single(self, output, input_, opts=None):
        algorithms.reduce_scatter(self, output, input_, REDUCTIONS[opts.reduceOp.op] if opts is not None else "sum")
        return _done([output])

    def all_to_all_single(self, output, input_, output_splits, input_splits, opts=None):
        if (output_splits and len(set(output_splits)) > 1) or (input_splits and len(set(input_splits)) > 1):
            raise ValueError("the roce backend sends equal parts in all_to_all_single")
        algorithms.alltoall(self, output, input_)
        return _done([output])

    def barrier(self, opts=None):
        algorithms.allreduce(self, torch.zeros(1), "sum")
        return _done([])

    def transport_stats(self) -> dict:
        return vars(self.nic.stats()) | {"qp_errors": self.nic.errors()}

    def rate_share(self) -> float:
        return self.nic.rate_share()

    def qp_states(self) -> list[dict]:
        return self.nic.qp_states()

    def shutdown(self) -> None:
        self.nic.close()


def _create(store, rank, size, timeout):
    return RoceGroup(store, rank, size, timeout)


def register() -> None:
    if NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(NAME, _create, devices=["cpu"])
