"""Grade a run: every `expect:` entry becomes pass/fail with its measured value, and every detector
gets its verdicts counted right or wrong against the injected ground truth.

A verdict is right when it names a link or node of a fault active at that moment (or within
LATE_S after its clear); the time to detect counts from the fault's onset (when its apply has
finished) to the first right verdict, as the runner received it.
"""

from __future__ import annotations

import math

from twin.detect.verdicts import Verdict, names_fault

LATE_S = 3.0  # a verdict this soon after a clear still refers to that fault
SLOW_FACTOR = 1.5  # a step slower than this x the healthy median is not recovered yet


def _verdicts(records: list[dict]) -> list[Verdict]:
    return [Verdict(t=r.get("received_t", r["t"]), detector=r["detector"], kind=r.get("verdict_kind"),
                    link=r.get("link"), node=r.get("node"), confidence=r.get("confidence"))
            for r in records if r["kind"] == "verdict"]


def _active(fault: dict, duration_s: float) -> tuple[float, float]:
    """From the start of the fault's apply to its clear."""
    start = fault["applied_s"] if fault["applied_s"] is not None else fault["scheduled_s"]
    end = fault["cleared_s"] if fault["cleared_s"] is not None else duration_s
    return start, end


def _onset(fault: dict, duration_s: float) -> float:
    """When the fault is in full effect: the end of its apply (bitflip first turns checksum
    offload off lab-wide, 0.4-0.8 s on rail4). A verdict during the apply (switch_down's ports
    go down before FRR is gone) is right, and counts as detected at once."""
    return _active(fault, duration_s)[0] + (fault.get("apply_took_s") or 0.0)


def detectors(records: list[dict], faults: list[dict], targets: dict[str, list[str]], duration_s: float) -> dict:
    """Per detector: verdicts, right, wrong, precision, recall, time to detect each fault."""
    verdicts = _verdicts(records)
    out = {}
    for name in sorted({v.detector for v in verdicts} | {r["detector"] for r in records if r["kind"] == "detector"}):
        mine = [v for v in verdicts if v.detector == name]
        right, detected = 0, {}
        for v in mine:
            hit = [f for f in faults if _active(f, duration_s)[0] <= v.t <= _active(f, duration_s)[1] + LATE_S
                   and names_fault(v, targets[f["id"]])]
            right += bool(hit)
            for f in hit:
                detected.setdefault(f["id"], round(max(0.0, v.t - _onset(f, duration_s)), 3))
        out[name] = {"verdicts": len(mine), "right": right, "wrong": len(mine) - right,
                     "precision": round(right / len(mine), 3) if mine else None,
                     "recall": round(len(detected) / len(faults), 3) if faults else None,
                     "detect_s": detected}
    return out


def grade(expectations: list, report: dict, records: list[dict], targets: dict[str, list[str]]) -> list[dict]:
    faults = {f["id"]: f for f in report["faults"]}
    graded = []
    for expectation in expectations:
        kind = expectation.kind
        target = getattr(expectation, kind)
        measured, limit, ok, why = None, None, False, ""
        if kind == "detect":
            limit = target.within_s
            times = [d["detect_s"][target.fault] for d in report["detectors"].values() if target.fault in d["detect_s"]]
            measured = min(times) if times else None
            ok = measured is not None and measured <= limit
            wrong = sum(d["wrong"] for d in report["detectors"].values())
            why = (f"first right verdict {measured} s after onset" if measured is not None
                   else "no detector named the fault's link or node") + f"; wrong verdicts in the run: {wrong}"
        elif kind == "reroute":
            limit = target.within_s
            measured = faults[target.fault]["last_route_change_s"]
            ok = measured is not None and measured <= limit
            why = f"last route change {measured} s after onset" if measured is not None else "routing never changed"
        elif kind == "recover":
            limit = target.within_s
            measured = _recovery(target.workload, report, records)
            ok = measured is not None and measured <= limit
            why = f"back {measured} s after onset" if measured is not None else "never recovered"
        elif kind == "collective":
            limit = target.max_slowdown if target.max_slowdown is not None else target.min_slowdown
            slowdowns = [w.get("slowdown", math.inf) if w.get("iterations") else math.inf
                         for name, c in report["collectives"].items()
                         if target.workload in (None, name, name.rsplit("-", 1)[0])
                         for w in c["fault_windows"]]
            measured = max(slowdowns) if slowdowns else None
            ok = measured is not None and (target.max_slowdown is None or measured <= target.max_slowdown) \
                and (target.min_slowdown is None or measured >= target.min_slowdown)
            why = ("no collective workload ran" if measured is None else
                   "a fault window without a single finished iteration" if measured == math.inf else
                   f"worst step-time slowdown x{measured}")
            measured = None if measured == math.inf else measured
        elif kind == "max_wrong_verdicts":
            limit = target
            measured = sum(d["wrong"] for d in report["detectors"].values())
            ok = measured <= limit
            why = f"{measured} wrong verdict(s) over {len(report['detectors'])} detector(s)"
        elif kind == "no_hang":
            chosen = _named(report, target.workload) if hasattr(target, "workload") else report["collectives"]
            measured = sum(c["hangs"] for c in chosen.values())
            limit = 0
            ok = (measured == 0) == (target is True or hasattr(target, "workload"))
            why = f"{measured} hang(s)"
        elif kind == "hang":
            causes = [h["cause"] for c in _named(report, target.workload).values() for h in c["hang_events"]]
            measured = sorted(set(causes))
            limit = target.cause
            ok = bool(causes) and (target.cause == "any" or target.cause in causes)
            why = (f"hung: {', '.join(f'{causes.count(c)} rank(s) by {c}' for c in measured)}" if causes
                   else "never hung")
        graded.append({"expect": expectation.model_dump(exclude_none=True), "kind": kind,
                       "status": "pass" if ok else "fail", "measured": measured, "limit": limit, "message": why})
    return graded


def _named(report: dict, workload: str) -> dict:
    """The collectives a workload reference names (`allreduce-1`, or `allreduce` if used once)."""
    return {n: c for n, c in report["collectives"].items() if workload in (n, n.rsplit("-", 1)[0])}


def _recovery(workload: str, report: dict, records: list[dict]) -> float | None:
    """Seconds from the (first) fault's onset until the workload is healthy again."""
    if not report["faults"]:
        return None
    onset = report["faults"][0]["applied_s"] or report["faults"][0]["scheduled_s"]
    if workload.startswith("flows"):
        times = [f["flows_recovered_after_s"] for f in report["faults"]]
        return None if any(t is None for t in times) else max(times)
    name = next((n for n in report["collectives"] if workload in (n, n.rsplit("-", 1)[0])), None)
    if name is None:
        return None
    c = report["collectives"][name]
    if c["first_hang_s"] is not None:
        return None if c["recovered_s"] is None else round(c["recovered_s"] - onset, 3)
    base = c["baseline"].get("median_step_s")
    if not base:
        return None
    slow = [r for r in records if r["kind"] == "collective" and r["workload"] == name and r["t"] >= onset
            and r["step_s"] > SLOW_FACTOR * base]
    return round(max((r["t"] + r["step_s"] for r in slow), default=onset) - onset, 3)
