"""Find the host whose NICs run slow by bisection over collective bandwidth.

Each step splits the candidate hosts in two halves and runs the same allreduce over the NICs
of each half; a ring runs at its slowest link, so the half holding the slow host is slower.
A half of one host is measured together with a host already cleared (one allreduce needs two
hosts). The search stops when the halves differ by less than `min_ratio`: nothing is slow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twin.collectives.bench import run_bench
from twin.lab.handle import Lab
from twin.progress import NullProgress, Progress

MIN_RATIO = 1.25  # the faster half must beat the slower by this factor to call it


@dataclass
class Step:
    halves: list[list[str]]
    measured: list[list[str]]  # hosts each allreduce ran over (a half, plus a cleared host if alone)
    busbw: list[float]

    @property
    def ratio(self) -> float:
        low, high = sorted(self.busbw)
        return high / low if low else float("inf")


@dataclass
class Search:
    steps: list[Step] = field(default_factory=list)
    suspect: str | None = None

    def as_dict(self) -> dict:
        return {"suspect": self.suspect,
                "steps": [{"halves": s.halves, "measured": s.measured, "busbw_Bps": [round(b) for b in s.busbw],
                           "ratio": round(s.ratio, 2)} for s in self.steps]}


def find_slow_node(lab: Lab, size: int = 4 << 20, iters: int = 3, min_ratio: float = MIN_RATIO,
                   progress: Progress | None = None, on_step=None) -> Search:
    progress = progress or NullProgress()
    candidates = sorted(h.name for h in lab.fabric.hosts)
    cleared: list[str] = []
    search = Search()
    while len(candidates) > 1:
        half = len(candidates) // 2
        halves = [candidates[:half], candidates[half:]]
        measured = [h if len(h) > 1 else h + cleared[:1] for h in halves]
        if any(len(group) < 2 for group in measured):
            break  # two candidates and nothing cleared yet: only a lab of two hosts gets here
        busbw = []
        for group in measured:
            progress.phase(f"allreduce over {', '.join(group)}", None)
            result = run_bench(lab, "allreduce", [size], ranks="hosts:" + ",".join(group),
                               iters=iters, warmup=1)
            busbw.append(result.measurements[0].busbw)
        step = Step(halves, measured, busbw)
        search.steps.append(step)
        if on_step:
            on_step(step)
        if step.ratio < min_ratio:
            return search  # both halves run alike: no slow host among the candidates
        slow = 0 if busbw[0] < busbw[1] else 1
        cleared += halves[1 - slow]
        candidates = halves[slow]
    search.suspect = candidates[0] if len(candidates) == 1 and search.steps else None
    return search
