"""One rank: a process in a host's namespace, its traffic bound to one NIC: gloo over TCP, or the
emulated RoCE transport (`transport: roce`, twin/roce) through the same torch calls.

    python -m twin.collectives.worker <job.json> <rank>

The job file lives in the lab's run directory (so the command line names the lab and
`twin lab down` ends the process). On a namespace lab the ranks are forked from one server that
imported torch once (collectives/forkserver.py), which calls main() with the same arguments.
Rendezvous goes through a FileStore on local disk, the stand-in for a cluster's separate
front-end network: a fault in the fabric hurts the collective, never the rendezvous. Every line
the rank writes to its output file is JSON.

Times (`t`) are CLOCK_MONOTONIC, shared by every process on the machine.

Modes: `bench` times each size like nccl-tests; `loop` runs iterations until stopped
(`compute_ms` > 0 makes it a training-step loop). A collective that does not finish within
`timeout_s` is recorded as a hang; the ranks then agree on a new generation through the
store and re-create the process group, as an elastic launcher would.

In a loop, each rank writes `enter` as it starts a collective (NCCL's flight recorder keeps the
same: the last collective each rank entered), and reads its control file (`rank-N.control`,
written by faults outside the network, faults/ranks.py) before each step: `{"compute": F}` makes
its compute take F times as long, `{"hang": true}` stops it before the next collective until the
file changes, as a hung GPU stops its rank while the process lives, and `{"crash": true}` kills the
process there, as a GPU fault kills the process that drives it.

    python -m twin.collectives.worker <job.json> <rank> --rejoin

starts a rank again after a crash (the launcher, once the fault is cleared): it joins the process
group its peers are forming now and starts at the step they are in.

A rank also writes its transport state every QP_REPORT_S (`qps`: each QP whose counters or path
changed, roce/nic.py `qp_states`; on gloo, its TCP connections in the same fields,
collectives/tcp_state.py), from a thread of its own, as a host agent reads its NIC's counters and
its sockets beside the job: the transport-state detector names links from them.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from twin.collectives.control import asked, control_file
from twin.collectives.tcp_state import TcpState, Tracer
from twin.collectives.verify import Buffers
from twin.lab.identity import become_rank
from twin.model.nics import Nic
from twin.procs import LOAD_NICE, set_priority
from twin.roce.nic import multipath_setting
from twin.roce.qp import REPORTED_FIELDS as TRANSPORT_FIELDS

STOP = False
CONTROL_POLL_S = 0.05  # a held rank reads its control file this often
QP_REPORT_S = 0.1  # a RoCE rank's QP states, this often


class Stopped(Exception):
    """Told to stop (SIGTERM, or the loop's duration ran out) while waiting for other ranks."""


def _stop(*_args) -> None:
    global STOP
    STOP = True


class Rank:
    def __init__(self, job: dict, rank: int):
        import torch.distributed as dist

        self.dist, self.job, self.rank = dist, job, rank
        self.world = len(job["nics"])
        self.timeout = datetime.timedelta(seconds=job["timeout_s"])
        self.out = open(Path(job["directory"]) / f"rank-{rank}.jsonl", "a", buffering=1)
        self.control = dist.FileStore(str(Path(job["directory"]) / "store"), self.world)
        self.generation = 0
        self.iteration = 0  # the step the loop is in (a failed collective is tried again, not skipped)
        self.rejoining = False  # restarted after a crash: learns the generation and the step from its peers
        self.groups: list = []
        self.backend = "roce" if job.get("transport") == "roce" else "gloo"
        self.transport_seen: dict = {}  # the transport counters already reported, this generation
        self.deadline = time.monotonic() + job.get("duration_s", 0) + job["timeout_s"] * 4 + 600
        self.control_file = control_file(Path(job["directory"]), rank)
        self.writing = threading.Lock()  # the QP reporter writes too: whole lines only

    def emit(self, **record) -> None:
        line = json.dumps({"rank": self.rank, "gen": self.generation, **record}) + "\n"
        with self.writing:
            self.out.write(line)

    def connect(self) -> None:
        """Join generation `self.generation`: one process group per channel (own TCP connections).

        Ranks first meet at a store barrier that waits as long as it takes: a rank still
        stuck in the broken collective arrives up to one timeout later, and a gloo rendezvous
        timing out on it would split the ranks over different generations.
        """
        dist = self.dist
        if self.rejoining:
            self.generation = self._forming_generation()
        joined = f"join{self.generation}"
        # The step this rank is in, written before it counts itself in: a rank that rejoins reads
        # its peers' once every rank has (a crash ends a rank between steps, not within one).
        self.control.set(f"step{self.generation}/{self.rank}", str(self.iteration))
        self.control.add(joined, 1)
        while self.control.add(joined, 0) < self.world:
            if STOP or time.monotonic() > self.deadline:
                raise Stopped()
            time.sleep(0.05)
        if self.rejoining:
            self.iteration = max(int(self.control.get(f"step{self.generation}/{rank}"))
                                 for rank in range(self.world) if rank != self.rank)
            self.rejoining = False
        store = dist.PrefixStore(f"gen{self.generation}", self.control)
        dist.init_process_group(self.backend, store=store, rank=self.rank, world_size=self.world,
                                timeout=self.timeout)
        self.groups = [None] + [dist.new_group(list(range(self.world)), timeout=self.timeout)
                                for _ in range(self.job["channels"] - 1)]

    def leave(self) -> None:
        """Before the QPs close, wait (up to a collective's timeout) until every rank is done: a
        peer whose last packet's acknowledgement was lost resends it, and only a NIC still open
        answers (a rank that had left made its peer fail with "retry count exceeded" after a
        finished job, a lossy test's flake of 2026-11-28). A job's ranks meet this way before
        destroying their communicator. A rank that failed never arrives: the wait is bounded."""
        left = f"left{self.generation}"
        self.control.add(left, 1)
        limit = time.monotonic() + self.job["timeout_s"]
        while self.control.add(left, 0) < self.world and time.monotonic() < limit and not STOP:
            time.sleep(0.05)

    def _forming_generation(self) -> int:
        """The first generation not every rank has joined: the one the peers of a restarted rank
        are waiting in (or will be, once their collective with the dead rank has failed)."""
        generation = 0
        while self.control.add(f"join{generation}", 0) >= self.world:
            generation += 1
        return generation

    def reconnect(self) -> None:
        """After any failure every rank moves to the next generation (they all fail the old one:
        a rank that left makes the others' next collective time out)."""
        try:
            self.dist.destroy_process_group()
        except Exception:  # a broken group may refuse to shut down cleanly; it is dropped either way
            pass
        self.generation += 1
        self.transport_seen = {}
        self.connect()

    def transport_delta(self) -> dict:
        """The RoCE transport's counters since the last call (retransmissions, NAKs, timeouts, QP
        errors), summed over this rank's process groups; empty on gloo."""
        if self.backend != "roce":
            return {}
        default = self.dist.distributed_c10d._get_default_group()
        totals: dict = {}
        for group in [default] + [g for g in self.groups if g is not None]:
            for key, value in group.transport_stats().items():
                totals[key] = totals.get(key, 0) + value
        delta = {key: value - self.transport_seen.get(key, 0) for key, value in totals.items()}
        self.transport_seen = totals
        return {key: delta[key] for key in TRANSPORT_FIELDS}

    def transport_levels(self) -> dict:
        """What the RoCE transport runs at now: the rate its congestion control allows (mean share of
        line rate over this rank's QPs); empty on gloo."""
        if self.backend != "roce":
            return {}
        default = self.dist.distributed_c10d._get_default_group()
        groups = [default] + [g for g in self.groups if g is not None]
        return {"rate_share": round(sum(g.rate_share() for g in groups) / len(groups), 4)}

    def qp_states(self) -> list[tuple[int, dict]]:
        """The RoCE QPs' states: (process group number, state) each."""
        groups = [self.dist.distributed_c10d._get_default_group()] + [g for g in self.groups if g is not None]
        return [(number, state) for number, group in enumerate(groups) for state in group.qp_states()]

    def report_qps(self, stopping: threading.Event, read: Callable[[], list[tuple[int, dict]]]) -> None:
        """Every QP_REPORT_S, the QPs (or connections) whose state changed (new counters, a new path),
        until stopped."""
        reported: dict = {}  # (generation, group, qp, 5-tuple) -> what was last written of it
        while not stopping.wait(QP_REPORT_S):
            generation, changed = self.generation, []
            try:
                states = read()
            except Exception:  # between generations: no group to read, or one being torn down
                continue
            for number, state in states:
                key = (generation, number, state["qp"], state["sport"], state["dst"], state["dport"])
                if reported.get(key) != state:
                    reported[key] = state
                    changed.append(state)
            if changed:
                self.emit(event="qps", t=time.monotonic(), qps=changed)

    def run_op(self, buffers: Buffers) -> float:
        """One collective, split over the channels; returns seconds."""
        start = time.perf_counter()
        works = [buffers.launch(self.dist, channel, group) for channel, group in enumerate(self.groups)]
        for work in works:
            work.wait()
        return time.perf_counter() - start

    def bench(self) -> None:
        import torch

        for op, size in ((op, size) for op in self.job["ops"] for size in self.job["sizes"]):
            buffers = Buffers(op, size, self.rank, self.world, self.job["channels"])
            for _ in range(self.job["warmup"]):
                buffers.fill()
                self.run_op(buffers)
            elapsed, wrong = 0.0, 0
            self.transport_delta()
            for _ in range(self.job["iters"]):
                buffers.fill()
                self.dist.barrier()
                elapsed += self.run_op(buffers)
                wrong += buffers.wrong()
            transport = self.transport_delta()
            slowest = torch.tensor([elapsed / self.job["iters"]])
            totals = torch.tensor([wrong, *transport.values()], dtype=torch.int64)
            self.dist.all_reduce(slowest, op=self.dist.ReduceOp.MAX)
            self.dist.all_reduce(totals)
            if self.rank == 0:
                self.emit(event="result", op=op, size=size, time_s=slowest.item(), wrong=int(totals[0].item()),
                          **dict(zip(transport, (int(v) for v in totals[1:].tolist()))))

    def asked(self) -> dict:
        """What a fault outside the network asks of this rank now (faults/ranks.py); {} when none."""
        return asked(self.control_file)

    def compute(self, compute_s: float) -> None:
        """The step's compute: `compute_s`, times the control file's factor; held while it says hang."""
        asked = self.asked()
        if asked.get("crash"):
            self.out.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if compute_s:
            time.sleep(compute_s * float(asked.get("compute", 1.0)))
        while asked.get("hang") and not STOP:
            time.sleep(CONTROL_POLL_S)
            asked = self.asked()

    def loop(self) -> None:
        size, compute_s = self.job["sizes"][0], self.job["compute_ms"] / 1000
        buffers = Buffers(self.job["ops"][0], size, self.rank, self.world, self.job["channels"])
        deadline = time.monotonic() + self.job["duration_s"]
        self.deadline = deadline
        while not STOP and time.monotonic() < deadline:
            step_start = time.monotonic()
            self.compute(compute_s)
            buffers.fill()
            op_start = time.monotonic()
            self.emit(event="enter", iter=self.iteration, t=op_start)
            try:
                comm_s = self.run_op(buffers)
            except RuntimeError as exc:  # timed out, a peer's connection broke, a QP failed
                error = str(exc).splitlines()[0][:300]
                self.emit(event="hang", t=op_start, waited_s=round(time.monotonic() - op_start, 3),
                          iter=self.iteration, error=error, cause=hang_cause(error), **self.transport_delta())
                self._recover()
                continue
            self.emit(event="iter", iter=self.iteration, t=step_start, comm_s=round(comm_s, 5),
                      step_s=round(time.monotonic() - step_start, 5), size=size, wrong=buffers.wrong(),
                      **self.transport_delta(), **self.transport_levels())
            self.iteration += 1

    def _recover(self) -> None:
        started = time.monotonic()
        while not STOP:
            try:
                self.reconnect()
            except RuntimeError as exc:
                self.emit(event="rejoin_failed", t=time.monotonic(), error=str(exc).splitlines()[0][:200])
                continue
            self.emit(event="recovered", t=time.monotonic(), took_s=round(time.monotonic() - started, 3))
            return


def hang_cause(error: str) -> str:
    """`timeout` when this rank's own timer ran out; `peer_closed` when another rank gave up first
    and tore its connections down (that rank may have started the collective later, so it
    waited less than the timeout); `transport_error` when a RoCE QP ran out of retries."""
    if "retry count exceeded" in error:
        return "transport_error"
    if "Timed out" in error:
        return "timeout"
    if "Connection closed" in error or "Connection reset" in error:
        return "peer_closed"
    return "error"


def open_tracer(address: str) -> Tracer | None:
    """The TCP path discovery's raw sockets; None where they cannot be opened (no CAP_NET_RAW): the
    rank then runs without reporting its connections, and says why in its log."""
    try:
        return Tracer(address)
    except OSError as exc:
        print(f"no TCP transport state: raw sockets refused ({exc})", file=sys.stderr, flush=True)
        return None


def tcp_reader(job: dict, rank: int, tracer: Tracer) -> Callable[[], list[tuple[int, dict]]]:
    """A gloo rank's connections' states, traced to the switch before each peer (the job's
    `switches` table, by leaf)."""
    leaf_at = {nic["address"]: nic["leaf"] for nic in job["nics"]}
    switches = job.get("switches", {}).get(job["nics"][rank]["leaf"], {})
    state = TcpState(tracer, lambda peer: switches.get(leaf_at.get(peer, ""), 1))
    return lambda: [(0, connection) for connection in state.states()]


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    rank = int(sys.argv[2])
    nic = Nic(**job["nics"][rank])
    # gloo binds its sockets to this interface's address: the rank's traffic uses its own rail
    # (a dual-port NIC's ports hold its one address: either names it).
    os.environ["GLOO_SOCKET_IFNAME"] = nic.interfaces[0]
    if job.get("transport") == "roce":  # configured like NCCL, from the environment
        roce = job["roce"]
        os.environ.update({
            "FABRIC_TWIN_ROCE_ADDRESS": nic.address, "FABRIC_TWIN_ROCE_IFNAME": nic.device or "",
            "FABRIC_TWIN_ROCE_PORTS": ",".join(nic.interfaces) if nic.device is None else "",
            "FABRIC_TWIN_ROCE_LABEL": nic.label, "FABRIC_TWIN_ROCE_MTU": str(roce["mtu"]),
            "FABRIC_TWIN_ROCE_TIME_SCALE": str(roce["time_scale"]), "NCCL_IB_TIMEOUT": str(roce["ib_timeout"]),
            "NCCL_IB_RETRY_CNT": str(roce["retry_cnt"]), "NCCL_IB_QPS_PER_CONNECTION": str(roce["qps_per_connection"]),
            "FABRIC_TWIN_ROCE_CC": roce.get("cc", "none"), "FABRIC_TWIN_ROCE_LINE_BPS": str(roce.get("line_bps", 0)),
            "FABRIC_TWIN_ROCE_MULTIPATH": multipath_setting(roce.get("multipath", False)),
            "FABRIC_TWIN_ROCE_PATH_OFFSETS": str(roce.get("path_offsets", 0))})
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    set_priority(LOAD_NICE)  # the load, whatever the priority of the runner that started it
    import torch
    import torch.distributed  # noqa: F401  (imported while the interpreter's files are readable)

    if job.get("transport") == "roce":
        from twin.roce.backend import register
        register()

    tracer = open_tracer(nic.address) if job.get("transport") != "roce" else None  # raw sockets: while root
    become_rank(nic.rail, job["directory"])

    torch.set_num_threads(1)  # two cores for the whole lab: no intra-op thread pools
    worker = Rank(job, rank)
    worker.rejoining = sys.argv[3:] == ["--rejoin"]
    worker.emit(event="start", t=time.monotonic(), pid=os.getpid(), rejoin=worker.rejoining)
    reporting = threading.Event()
    read = worker.qp_states if job.get("transport") == "roce" else tcp_reader(job, rank, tracer) if tracer else None
    if read is not None:
        threading.Thread(target=worker.report_qps, args=(reporting, read), name="qp-report", daemon=True).start()
    try:
        worker.connect()
        worker.emit(event="connected", t=time.monotonic())
        if job["mode"] == "bench":
            worker.bench()
        else:
            worker.loop()
    except Stopped:
        pass
    reporting.set()
    worker.emit(event="done", t=time.monotonic())
    if job.get("transport") == "roce":
        worker.leave()
    try:
        worker.dist.destroy_process_group()
    except Exception:  # peers may already be gone at the end of a scenario
        pass


if __name__ == "__main__":
    main()
