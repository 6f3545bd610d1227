"""rank-health: the job-wide view of a training job, from its ranks' own records: the collective
each rank entered last (NCCL's flight recorder keeps the same) and the order in which the ranks
entered each. It names the host of a rank that never entered the collective its peers wait in
(`rank_hang`: a hung GPU), of a rank whose process died (`rank_crash`: the job's launcher saw it
exit), and of a rank whose own part of every step (its compute, outside the collective) takes
longer than the others' by far more than they vary (`slow_compute`): faults outside the network,
which the job reports as network timeouts, broken connections and slow steps. It never names a
link or a switch.

No probe traffic, no counters: the ranks write `enter` before each collective and `iter` after it
with the step's time and the collective's (collectives/worker.py), the launcher says when a rank
exits and when it is started again (`exited`, `restarted`), and the run's collective workloads
hand every record to it.

A straggler is found from each rank's own time, not from the order the ranks enter: the order
follows the ring (the ranks the last chunk reaches last leave it last and enter the next one
last), and on a busy machine that lag alone made a healthy rank 'last into 8 of 8' (CI, docker
tier: host-g1-h2 named at 3.8 s with its own time 101-112 ms like every other rank's).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque

from twin.detect.verdicts import Verdict

DETECTOR = "rank-health"
POLL_S = 0.25
HANG_MIN_S = 2.0  # a rank this far behind its peers' collective (or 3 of their steps, if longer) hangs
STEPS = 8  # steps weighed for a straggler (the median of each rank's own time over them)
SLOWER_MIN_S = 0.02  # the straggler's own time exceeds the others' by at least this
SLOWER_SHARE = 0.2  # and by this share of theirs (a GPU at 1.5x: 0.5)
FORGET_S = 5.0  # a name not seen again for this long may be named again


class RankView:
    """One job's ranks: what each entered last, and when each entered recent collectives."""

    def __init__(self, nics: list[str]):
        self.nics = nics
        self.world = len(nics)
        self.last: dict[int, tuple[int, float]] = {}  # rank -> (iteration, monotonic t) last entered
        self.steps: deque[float] = deque(maxlen=STEPS)  # recent step times
        self.own: dict[int, deque[float]] = {}  # rank -> its recent steps' time outside the collective
        self.dead: set[int] = set()  # ranks whose process exited and was not started again
        self.away: set[int] = set()  # and those started again that have not entered a collective yet
        self.lock = threading.Lock()

    def record(self, record: dict, _nic: str) -> None:
        with self.lock:
            if record.get("event") == "enter":
                rank, iteration, t = record["rank"], record["iter"], record["t"]
                self.last[rank] = (iteration, t)
                self.away.discard(rank)
            elif record.get("event") == "iter":
                self.steps.append(record["step_s"])
                if "rank" in record and "comm_s" in record:
                    own = self.own.setdefault(record["rank"], deque(maxlen=STEPS))
                    own.append(record["step_s"] - record["comm_s"])
            elif record.get("event") == "exited":
                self.dead.add(record["rank"])
                self.away.add(record["rank"])
            elif record.get("event") == "restarted":
                self.dead.discard(record["rank"])
                self.own.pop(record["rank"], None)  # a new process: its old steps say nothing of it

    def crashed(self) -> list[str]:
        """NICs of ranks whose process is gone."""
        with self.lock:
            return [self.nics[rank] for rank in sorted(self.dead)]

    def hung(self, now: float) -> list[str]:
        """NICs of ranks that have not entered the collective the others entered long ago."""
        with self.lock:
            if len(self.last) < self.world:
                return []  # not every rank has started
            newest = max(iteration for iteration, _t in self.last.values())
            waiting = [t for iteration, t in self.last.values() if iteration == newest]
            behind = [rank for rank, (iteration, _t) in self.last.items()
                      if iteration < newest and rank not in self.away]  # a dead rank is not hung
            patience = max(HANG_MIN_S, 3 * statistics.median(self.steps)) if self.steps else HANG_MIN_S
            if not behind or 2 * len(behind) >= self.world or now - min(waiting) < patience:
                return []
            return [self.nics[rank] for rank in behind]

    def straggler(self) -> str | None:
        """The NIC of a rank whose own time (a step less its collective) over the last STEPS steps
        exceeds the other ranks' by far more than they vary."""
        with self.lock:
            if len(self.own) < self.world or any(len(times) < STEPS for times in self.own.values()):
                return None
            medians = {rank: statistics.median(times) for rank, times in self.own.items()}
        slowest = max(medians, key=medians.get)
        others = statistics.median(m for rank, m in medians.items() if rank != slowest)
        if medians[slowest] - others >= max(SLOWER_MIN_S, SLOWER_SHARE * others):
            return self.nics[slowest]
        return None


class RankHealth:
    """Verdicts from the views of the run's jobs: a host is named once per kind while it holds, and
    forgotten after FORGET_S without it (one collective where jitter put another rank last must
    not name the slow one twice)."""

    def __init__(self, views: list[RankView]):
        self.views = views
        self._seen: dict[tuple[str, str], float] = {}  # named (kind, host) -> when it last held

    def observe(self, t: float, now: float) -> list[Verdict]:
        current = set()
        for view in self.views:
            current |= {("rank_hang", nic.split(":")[0]) for nic in view.hung(now)}
            current |= {("rank_crash", nic.split(":")[0]) for nic in view.crashed()}
            slow = view.straggler()
            if slow is not None:
                current.add(("slow_compute", slow.split(":")[0]))
        self._seen = {named: seen for named, seen in self._seen.items() if now - seen <= FORGET_S}
        verdicts = [Verdict(t=t, detector=DETECTOR, kind=kind, node=host, confidence=1.0)
                    for kind, host in sorted(current - set(self._seen))]
        self._seen.update({named: now for named in current})
        return verdicts


def attach(run, name: str) -> None:
    """Follow every collective workload of the run; sweep their views until the run ends."""
    views = []
    for workload in run.workloads:
        if hasattr(workload, "listeners"):
            view = RankView([nic.label for nic in workload.spec.nics])
            workload.listeners.append(view.record)
            views.append(view)
    health = RankHealth(views)

    def loop(stopping) -> None:
        while not stopping.wait(POLL_S):
            for verdict in health.observe(run.events.now(), time.monotonic()):
                run.emit(name, verdict, source="builtin")

    run.poll(name, loop)
