"""`--quick` (CI drills): a scenario's timeline shortened without changing what is measured. The
lead-in before the first fault (or planned change) becomes QUICK_LEAD_S (all move back together, their
durations and the expectations unchanged), the run ends QUICK_TAIL_S after the last clear, and a
scenario without faults runs at most QUICK_PLAIN_S."""

from __future__ import annotations

QUICK_LEAD_S = 3.0
QUICK_TAIL_S = 3.0
QUICK_PLAIN_S = 30.0


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shorten(data: dict) -> None:
    """Rewrite a scenario document's timeline in place, before validation: a document it cannot
    read (no numbers where they belong, faults not a list) is left alone for validation to report."""
    duration, faults, changes = data.get("duration_s"), data.get("faults") or [], data.get("changes") or []
    if not _number(duration) or not isinstance(faults, list) or not isinstance(changes, list):
        return
    faults = [f for f in (*faults, *changes) if isinstance(f, dict)]  # planned changes move with the faults
    if not all(_number(f.get("at_s")) for f in faults):
        return
    if not faults:
        data["duration_s"] = min(duration, QUICK_PLAIN_S)
        return
    shift = max(0.0, min(f["at_s"] for f in faults) - QUICK_LEAD_S)
    for f in faults:
        f["at_s"] -= shift
    ends = [f["at_s"] + f["duration_s"] if _number(f.get("duration_s")) else None for f in faults]
    duration -= shift
    data["duration_s"] = duration if None in ends else min(duration, max(ends) + QUICK_TAIL_S)
