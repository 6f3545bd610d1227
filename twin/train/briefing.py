"""The briefing: what the job owner and the pingmesh show, in operator language, never the cause."""

from __future__ import annotations

import statistics
import time


def _clock(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall))


def briefing(events: list[dict], onset_wall: float) -> str:
    faults = [e for e in events if e["kind"] == "fault" and e.get("op") == "applied"]
    if not faults:
        return "Nothing to report yet."
    onset = min(e["actual_s"] for e in faults)
    since = _clock(onset_wall)
    steps = [e for e in events if e["kind"] == "collective"]
    before = [e["step_s"] for e in steps if onset - 20 <= e["t"] < onset]
    after = [e for e in steps if e["t"] >= onset + 0.5]
    # A hang record is timed at the start of the collective that then waited: count it when
    # the waiting reached past the onset.
    hangs = [e for e in events if e["kind"] == "hang" and e["t"] + e.get("waited_s", 0) >= onset]
    lines = []
    world = len({e["rank"] for e in steps}) or "?"
    if hangs:
        first = sorted({e["rank"] for e in hangs if e["t"] <= min(h["t"] for h in hangs) + 1})
        # Ranks whose peer gave up first waited less than the timeout: quote a rank's own timer.
        timed_out = [e for e in hangs if e.get("cause") == "timeout"] or hangs
        waited = max(e.get("waited_s", 0) for e in timed_out)
        hung_at = _clock(onset_wall + max(min(h["t"] for h in hangs) - onset, 0))
        lines.append(f"Job owner: the training job ({world} ranks) hung at {hung_at}: "
                     f"an allreduce timed out after {waited:.0f} s (first reported by "
                     + ("every rank" if len(first) == world else f"rank(s) {', '.join(map(str, first))}")
                     + "), and restarting the process group keeps failing.")
    elif before and after:
        base, now = statistics.median(before), statistics.median(e["step_s"] for e in after)
        change = 100 * (now / base - 1)
        if abs(change) >= 5:
            by_rank: dict[int, list[float]] = {}
            for e in after:
                by_rank.setdefault(e["rank"], []).append(e["comm_s"])
            slowest = sorted(by_rank, key=lambda r: statistics.median(by_rank[r]), reverse=True)[:2]
            lines.append(f"Job owner: step time {'up' if change > 0 else 'down'} {abs(change):.0f} % since {since} "
                         f"({base:.2f} s -> {now:.2f} s per step, {world} ranks); ranks "
                         f"{' and '.join(map(str, slowest))} spend the longest in communication.")
        else:
            lines.append(f"Job owner: the training job ({world} ranks) looks normal: step time {base:.2f} s -> "
                         f"{now:.2f} s.")
    elif before:
        lines.append(f"Job owner: no training step has finished since {since} ({world} ranks; "
                     f"{statistics.median(before):.2f} s per step before).")
    probes = [e for e in events if e["kind"] == "probe" and e["t"] >= onset + 0.5]
    sent, lost = sum(e["sent"] for e in probes), sum(e["lost"] for e in probes)
    if lost:
        pairs = sorted({p.split(" :")[0] for e in probes for p in e.get("lossy", [])})
        hosts = sorted({end.strip().split(":")[0] for pair in pairs for end in pair.split("->")})
        lines.append(f"Pingmesh alert since {since}: {100 * lost / sent:.1f} % of probes lost, on paths between "
                     f"{len(hosts)} hosts ({', '.join(hosts[:6])}{', ...' if len(hosts) > 6 else ''}).")
    else:
        lines.append("Pingmesh: no probe loss.")
    return "\n".join(lines)
