"""The `expect:` section of a scenario: every kind of expectation, its schema, what it refers to
(checked when the scenario is loaded), and its grader (run on the report after the run).

A new kind is a params model, a grader and one `EXPECTATIONS.add` line; the `Expectation` model
of the scenario file is built from the registry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from twin.registry import Registry
from twin.results.report import CollectiveSummary, Report

HANG_CAUSES = ("timeout", "peer_closed", "transport_error", "any")
SLOW_FACTOR = 1.5  # a step slower than this x the healthy median is not recovered yet


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FaultWithin(_Strict):
    fault: str
    within_s: float = Field(gt=0)


class WorkloadWithin(_Strict):
    workload: str
    within_s: float = Field(gt=0)


class CollectiveLimit(_Strict):
    max_slowdown: float | None = Field(None, ge=1, description="no fault window slower than this, at least 1 "
                                                               "(below 1 the fault would have to speed the job up)")
    min_slowdown: float | None = Field(None, ge=1, description="a fault window at least this much slower "
                                                               "(the fault must hurt the job), at least 1")
    workload: str | None = None

    @model_validator(mode="after")
    def _a_limit(self):
        if self.max_slowdown is None and self.min_slowdown is None:
            raise ValueError("give max_slowdown, min_slowdown or both")
        if self.max_slowdown is not None and self.min_slowdown is not None and self.min_slowdown > self.max_slowdown:
            raise ValueError(f"min_slowdown {self.min_slowdown} is above max_slowdown {self.max_slowdown}: "
                             "no slowdown passes both")
        return self


class LossLimit(_Strict):
    fault: str = Field(description="the fault's or planned change's id")
    max_pct: float | None = Field(None, ge=0, le=100, description="the flows lose at most this share in its window")
    min_pct: float | None = Field(None, ge=0, le=100, description="... or at least this share (the way that "
                                                                  "loses packets, shown to)")

    @model_validator(mode="after")
    def _a_limit(self):
        if self.max_pct is None and self.min_pct is None:
            raise ValueError("give max_pct, min_pct or both")
        if self.max_pct is not None and self.min_pct is not None and self.min_pct > self.max_pct:
            raise ValueError(f"min_pct {self.min_pct} is above max_pct {self.max_pct}: no loss passes both")
        return self


class WorkloadRef(_Strict):
    workload: str


class HangOf(_Strict):
    workload: str
    cause: str = Field("any", description="timeout | peer_closed | transport_error | any")

    @model_validator(mode="after")
    def _cause(self):
        if self.cause not in HANG_CAUSES:
            raise ValueError(f"cause {self.cause!r}: one of {', '.join(HANG_CAUSES)}")
        return self


# A grader: (the expectation's value, the report, the run's events) -> (measured, limit, passed, why)
Grader = Callable[[Any, Report, list[dict]], tuple[Any, Any, bool, str]]


@dataclass(frozen=True)
class ExpectationKind:
    schema: Any  # the type of the entry's value
    description: str
    grade: Grader
    refers_to: tuple[str, ...] = ()  # "fault", "workload", "detector": checked when the scenario loads


def _detect(target: FaultWithin, report: Report, _records) -> tuple:
    times = [d.detect_s[target.fault] for d in report.detectors.values() if target.fault in d.detect_s]
    measured = min(times) if times else None
    wrong = sum(d.wrong for d in report.detectors.values())
    why = (f"first right verdict {measured} s after onset" if measured is not None
           else "no detector named the fault's link or node") + f"; wrong verdicts in the run: {wrong}"
    fault = next((f for f in report.faults if f.id == target.fault), None)
    if measured is None and fault is not None and fault.probed_paths == 0:
        why += "; no probed path crossed its link or node while it was on (the probes could not see it)"
    return measured, target.within_s, measured is not None and measured <= target.within_s, why


def _reroute(target: FaultWithin, report: Report, _records) -> tuple:
    measured = next(f.last_route_change_s for f in report.faults if f.id == target.fault)
    why = f"last route change {measured} s after onset" if measured is not None else "routing never changed"
    return measured, target.within_s, measured is not None and measured <= target.within_s, why


def _recover(target: WorkloadWithin, report: Report, records: list[dict]) -> tuple:
    measured = _recovery(target.workload, report, records)
    why = f"back {measured} s after onset" if measured is not None else "never recovered"
    return measured, target.within_s, measured is not None and measured <= target.within_s, why


def _collective(target: CollectiveLimit, report: Report, _records) -> tuple:
    limit = target.max_slowdown if target.max_slowdown is not None else target.min_slowdown
    slowdowns = [w.get("slowdown", math.inf) if w.get("iterations") else math.inf
                 for name, c in report.collectives.items()
                 if target.workload in (None, name, name.rsplit("-", 1)[0]) for w in c.fault_windows]
    measured = max(slowdowns) if slowdowns else None
    ok = measured is not None and (target.max_slowdown is None or measured <= target.max_slowdown) \
        and (target.min_slowdown is None or measured >= target.min_slowdown)
    why = ("no collective workload ran" if measured is None else
           "a fault window without a single finished iteration" if measured == math.inf else
           f"worst slowdown x{measured} (mean step in a fault window / healthy median step)")
    return None if measured == math.inf else measured, limit, ok, why


def _loss(target: LossLimit, report: Report, _records) -> tuple:
    window = next(f for f in report.faults if f.id == target.fault)
    measured = window.flows.loss_pct
    limit = target.max_pct if target.max_pct is not None else target.min_pct
    ok = measured is not None and (target.max_pct is None or measured <= target.max_pct) \
        and (target.min_pct is None or measured >= target.min_pct)
    why = (f"the flows lost {window.flows.sent - window.flows.received} of {window.flows.sent} packets "
           f"({measured} %) while it was active" if measured is not None
           else "no flow packet was sent while it was active")
    return measured, limit, ok, why


def _max_wrong_verdicts(target: int, report: Report, _records) -> tuple:
    measured = sum(d.wrong for d in report.detectors.values())
    return measured, target, measured <= target, f"{measured} wrong verdict(s) over {len(report.detectors)} detector(s)"


def _no_hang(target: bool | WorkloadRef, report: Report, _records) -> tuple:
    chosen = _named(report, target.workload) if isinstance(target, WorkloadRef) else report.collectives
    measured = sum(c.hangs for c in chosen.values())
    return measured, 0, (measured == 0) == (target is True or isinstance(target, WorkloadRef)), f"{measured} hang(s)"


def _hang(target: HangOf, report: Report, _records) -> tuple:
    causes = [h["cause"] for c in _named(report, target.workload).values() for h in c.hang_events]
    measured = sorted(set(causes))
    ok = bool(causes) and (target.cause == "any" or target.cause in causes)
    why = (f"hung: {', '.join(f'{causes.count(c)} rank(s) by {c}' for c in measured)}" if causes else "never hung")
    return measured, target.cause, ok, why


EXPECTATIONS: Registry[ExpectationKind] = Registry("expectation")
EXPECTATIONS.add("detect", ExpectationKind(FaultWithin, "a detector names the fault's link or node within_s",
                                           _detect, ("fault", "detector")))
EXPECTATIONS.add("reroute", ExpectationKind(FaultWithin, "routing has finished changing within_s of onset",
                                            _reroute, ("fault",)))
EXPECTATIONS.add("recover", ExpectationKind(WorkloadWithin, "the workload is back to healthy within_s of onset",
                                            _recover, ("workload",)))
EXPECTATIONS.add("loss", ExpectationKind(LossLimit, "the flows' loss while the fault or change is active: at most "
                                         "max_pct (a drain that loses nothing) or at least min_pct", _loss, ("fault",)))
EXPECTATIONS.add("collective", ExpectationKind(CollectiveLimit, "lost throughput in fault windows: mean step time "
                                               "over the healthy median step",
                                               _collective, ("workload",)))
EXPECTATIONS.add("no_hang", ExpectationKind(bool | WorkloadRef, "no collective (or this workload's) hung; false: "
                                            "some collective did", _no_hang, ("workload",)))
EXPECTATIONS.add("hang", ExpectationKind(HangOf, "this workload hung, for this cause (a job that dies)",
                                         _hang, ("workload",)))
EXPECTATIONS.add("max_wrong_verdicts",
                 ExpectationKind(Annotated[int, Field(ge=0)], "verdicts naming no active fault (false positives), "
                                                       "over every detector", _max_wrong_verdicts, ("detector",)))


class _OneKind(_Strict):
    """One entry of `expect:`: exactly one kind, with its value."""

    @model_validator(mode="after")
    def _one(self):
        if sum(v is not None for v in self.model_dump().values()) != 1:
            raise ValueError(f"each entry is exactly one of {', '.join(EXPECTATIONS.names())}")
        return self

    @property
    def kind(self) -> str:
        return next(k for k, v in self.model_dump().items() if v is not None)

    @property
    def value(self) -> Any:
        return getattr(self, self.kind)


Expectation = create_model("Expectation", __base__=_OneKind,
                           **{name: (kind.schema | None, Field(None, description=kind.description))
                              for name, kind in EXPECTATIONS.items()})


def grade(expectations: list, report: Report, records: list[dict]) -> list[dict]:
    graded = []
    for expectation in expectations:
        kind = expectation.kind
        measured, limit, ok, why = EXPECTATIONS.get(kind).grade(expectation.value, report, records)
        graded.append({"expect": expectation.model_dump(exclude_none=True), "kind": kind,
                       "status": "pass" if ok else "fail", "measured": measured, "limit": limit, "message": why})
    return graded


def workload_names(workloads: list[dict]) -> dict[str, str]:
    """name -> kind: each workload is `<kind>-<index>`, and a kind used once also answers to its kind."""
    kinds = [w.get("kind") if isinstance(w.get("kind"), str) else None for w in workloads]
    names = {f"{k}-{i}": k for i, k in enumerate(kinds) if k is not None}
    names |= {k: k for k in kinds if k is not None and kinds.count(k) == 1}
    return names


def _named(report: Report, workload: str) -> dict[str, CollectiveSummary]:
    """The collectives a workload reference names (`allreduce-1`, or `allreduce` if used once)."""
    return {n: c for n, c in report.collectives.items() if workload in (n, n.rsplit("-", 1)[0])}


def _recovery(workload: str, report: Report, records: list[dict]) -> float | None:
    """Seconds from the (first) fault's onset until the workload is healthy again."""
    if not report.faults:
        return None
    onset = report.faults[0].applied_s or report.faults[0].scheduled_s
    if workload.startswith("flows"):
        times = [f.flows_recovered_after_s for f in report.faults]
        return None if any(t is None for t in times) else max(times)
    name = next((n for n in report.collectives if workload in (n, n.rsplit("-", 1)[0])), None)
    if name is None:
        return None
    c = report.collectives[name]
    if c.first_hang_s is not None:
        return None if c.recovered_s is None else round(c.recovered_s - onset, 3)
    base = c.baseline.get("median_step_s")
    if not base:
        return None
    # a step is recorded at its start: one still running at the onset is the fault's too
    slow = [r for r in records if r["kind"] == "collective" and r["workload"] == name
            and r["t"] + r["step_s"] >= onset and r["step_s"] > SLOW_FACTOR * base]
    return round(max((r["t"] + r["step_s"] for r in slow), default=onset) - onset, 3)
