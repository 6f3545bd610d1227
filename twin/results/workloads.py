"""What the report says about collectives and probes, from the run's events only.

Collective iterations and probe intervals outside every fault window and its recovery (after
warm-up) are the run's own healthy baseline. A window's recovery lasts SETTLE_S after its clear,
or until the route changes its clear made are over (a switch brought back: FRR restarts and BGP
re-converges for seconds, and that loss counted as healthy). Inside a window the report gives the
median and mean step time, the slowdown against the baseline, the busbw, and every hang (how long
the ranks waited, and when they came back).

`slowdown` is the window's mean step time over the healthy median: what the job lost in
throughput, which is what its owner sees. A go-back-N transport loses a few steps to long
retransmission timeouts while most steps run at full speed, so the median step of a window can
look healthy while the job makes a third of its progress; `median_slowdown` (the typical step)
is kept next to it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from twin.roce.qp import REPORTED_FIELDS

SETTLE_S = 2.0  # after a fault's clear, traffic is the fault's this long at least (the routes it moved return)

COLLECTIVE_WARMUP_ITERS = 1  # the first iteration includes connection set-up


def _step_times(records: list[dict]) -> dict[tuple[str, int, int], dict]:
    """(workload, generation, iteration) -> start t (a `collective` record's t is when its rank
    began the step) and slowest rank's step time."""
    steps: dict[tuple[str, int, int], dict] = {}
    for r in records:
        if r["kind"] != "collective" or r["iter"] < COLLECTIVE_WARMUP_ITERS:
            continue
        key = (r["workload"], r["gen"], r["iter"])
        step = steps.setdefault(key, {"t": r["t"], "step_s": 0.0, "busbw": [], "wrong": 0})
        step["t"] = min(step["t"], r["t"])
        step["step_s"] = max(step["step_s"], r["step_s"])
        step["busbw"].append(r["busbw_Bps"])
        step["wrong"] += r["wrong"]
    return steps


def _summary(steps: list[dict]) -> dict:
    if not steps:
        return {"iterations": 0}
    times = [s["step_s"] for s in steps]
    return {"iterations": len(steps),
            "median_step_s": round(statistics.median(s["step_s"] for s in steps), 4),
            "mean_step_s": round(statistics.fmean(s["step_s"] for s in steps), 4),
            "max_step_s": round(max(s["step_s"] for s in steps), 4),
            # coefficient of variation of the step times: how even the iterations ran
            "step_cv": round(statistics.pstdev(times) / statistics.fmean(times), 4) if statistics.fmean(times) else 0.0,
            "median_busbw_Bps": round(statistics.median(min(s["busbw"]) for s in steps)),
            "wrong": sum(s["wrong"] for s in steps)}


def _overlaps(step: dict, start: float, end: float) -> bool:
    """A step [t, t + step_s) overlaps [start, end): a step that began before a fault and stalled
    in it is the fault's, not the healthy baseline's."""
    return step["t"] < end and step["t"] + step["step_s"] > start


def _transport(records: list[dict], workload: str, start: float, end: float) -> dict:
    """What the RoCE transport did for one workload in [start, end) (ranks' steps overlapping it,
    hangs in it): summed over ranks."""
    totals = {name: 0 for name in REPORTED_FIELDS}
    for r in records:
        if r.get("workload") != workload:
            continue
        if (r["kind"] == "collective" and _overlaps(r, start, end)) or (r["kind"] == "hang" and start <= r["t"] < end):
            for name in REPORTED_FIELDS:
                totals[name] += r.get(name, 0)
    return totals


def healthy_after(windows: list[tuple[float, float]], settled: list[float] | None) -> list[tuple[float, float]]:
    """Each window from its start to when its traffic is healthy again: `settled`, or its end plus
    SETTLE_S."""
    return [(start, settled[number] if settled else end + SETTLE_S) for number, (start, end) in enumerate(windows)]


def collectives(records: list[dict], windows: list[tuple[float, float]], settled: list[float] | None = None) -> dict:
    """Per workload: baseline (steps outside every window and its recovery, until `settled`), per
    fault window, and hangs; on roce, what the transport did."""
    steps = _step_times(records)
    transports = {r["workload"]: r.get("transport", "tcp") for r in records
                  if r["kind"] == "workload" and r.get("op") == "start" and "op_kind" in r}
    by_workload: dict[str, list[dict]] = defaultdict(list)
    for (workload, _gen, _it), step in steps.items():
        by_workload[workload].append(step)
    result, recovering = {}, healthy_after(windows, settled)
    for workload, items in sorted(by_workload.items()):
        healthy = [s for s in items if not any(_overlaps(s, a, b) for a, b in recovering)]
        base = _summary(healthy)
        per_window = []
        roce = transports.get(workload) == "roce"
        for start, end in windows:
            inside = _summary([s for s in items if _overlaps(s, start, end)])
            if base.get("median_step_s") and inside.get("median_step_s"):
                inside["slowdown"] = round(inside["mean_step_s"] / base["median_step_s"], 3)
                inside["median_slowdown"] = round(inside["median_step_s"] / base["median_step_s"], 3)
            if roce:
                inside["transport"] = _transport(records, workload, start, end)
            per_window.append(inside)
        hangs = [r for r in records if r["kind"] == "hang" and r["workload"] == workload]
        recovered = [r for r in records if r["kind"] == "recovered" and r["workload"] == workload]
        result[workload] = {
            "transport": transports.get(workload, "tcp"),
            **({"transport_totals": _transport(records, workload, float("-inf"), float("inf"))} if roce else {}),
            "baseline": base, "fault_windows": per_window,
            "hangs": len({(h["gen"]) for h in hangs}),
            "hang_events": [{"t": h["t"], "rank": h["rank"], "gen": h["gen"], "waited_s": h["waited_s"],
                             "cause": h["cause"]} for h in hangs[:50]],
            "first_hang_s": min((h["t"] for h in hangs), default=None),
            "recovered_s": max((r["t"] for r in recovered), default=None),
            "rank_exits": [{"t": r["t"], "rank": r["rank"], "nic": r["nic"],
                            "restarted": r["kind"] == "rank_restarted"} for r in records
                           if r["kind"] in ("rank_crashed", "rank_restarted") and r["workload"] == workload][:50],
            "wrong": sum(s["wrong"] for s in items),
        }
    return result


def probes(records: list[dict], windows: list[tuple[float, float]], settled: list[float] | None = None) -> dict:
    rows = [r for r in records if r["kind"] == "probe"]
    if not rows:
        return {}

    def loss(selected):
        sent = sum(r["sent"] for r in selected)
        return {"intervals": len(selected), "sent": sent, "lost": sum(r["lost"] for r in selected),
                "loss_pct": round(100.0 * sum(r["lost"] for r in selected) / sent, 3) if sent else None}

    def overlaps(r, start, end):
        return r["t"] + r.get("span_s", 0.0) > start and r["t"] < end

    recovering = healthy_after(windows, settled)
    outside = [r for r in rows if not any(overlaps(r, a, b) for a, b in recovering)]
    return {"baseline": loss(outside),
            "fault_windows": [loss([r for r in rows if overlaps(r, a, b)]) for a, b in windows]}


def step_series(records: list[dict]) -> dict[str, tuple[list[float], list[float]]]:
    """workload -> (iteration start times, slowest rank's step time) for the timeline."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for (workload, _g, _i), step in sorted(_step_times(records).items(), key=lambda kv: kv[1]["t"]):
        ts, ys = series.setdefault(workload, ([], []))
        ts.append(step["t"])
        ys.append(step["step_s"])
    return series


def rate_series(records: list[dict]) -> dict[str, tuple[list[float], list[float]]]:
    """workload -> (iteration start times, the mean sending rate DCQCN allowed its ranks' QPs, as a
    share of line rate) for the timeline; only workloads whose rate was ever cut."""
    by_step: dict[tuple[str, int, int], list] = {}
    for r in records:
        if r["kind"] == "collective" and "rate_share" in r:
            entry = by_step.setdefault((r["workload"], r["gen"], r["iter"]), [r["t"], []])
            entry[0] = min(entry[0], r["t"])
            entry[1].append(r["rate_share"])
    series: dict[str, tuple[list[float], list[float]]] = {}
    for (workload, _g, _i), (t, shares) in sorted(by_step.items(), key=lambda kv: kv[1][0]):
        ts, ys = series.setdefault(workload, ([], []))
        ts.append(t)
        ys.append(round(statistics.fmean(shares), 4))
    return {w: s for w, s in series.items() if min(s[1], default=1.0) < 1.0}


def mitigation(records: list[dict]) -> dict | None:
    """Hash dodging moves and isolation (drains, restores) seen in the run."""
    dodges = [r for r in records if r["kind"] == "dodge"]
    isolation = [{k: r.get(k) for k in ("t", "op", "link", "detector", "took_s", "reason") if r.get(k) is not None}
                 for r in records if r["kind"] == "isolate"]
    if not dodges and not isolation:
        return None
    moved = [r for r in dodges if r.get("moved")]
    return {"dodges": {"moved": len(moved), "avoided_all": sum(1 for r in moved if r.get("avoided")),
                       "not_moved": len(dodges) - len(moved),
                       "after_a_verdict": sum(1 for r in moved if r.get("because") == "named by a detector"),
                       "before_a_loss": sum(1 for r in moved if r.get("trigger") == "verdict"),
                       "first_s": moved[0]["t"] if moved else None, "last_s": moved[-1]["t"] if moved else None},
            "isolation": isolation}


def fabric(records: list[dict], windows: list[tuple[float, float]], lossless: bool) -> dict | None:
    """Queue drops, PFC pauses and ECN marks over the run and per fault window (from the `fabric` events:
    running totals, telemetry/fabric.py). A window runs from the last count before its onset to the
    first count after its clear (both are taken when the fault is applied and cleared)."""
    from twin.telemetry.fabric import replay

    series = replay(records)
    if not series:
        return None
    zero = {"queue_drops": 0, "pause_s": {}, "pauses": {}, "marks": {}, "steered": {}}

    def before(t: float) -> dict:
        earlier = [totals for at, totals in series if at < t]
        return earlier[-1] if earlier else zero

    def after(t: float) -> dict:
        return next((totals for at, totals in series if at >= t), series[-1][1])

    def delta(a: dict, b: dict) -> dict:
        pause = {k: round(v - a["pause_s"].get(k, 0.0), 4) for k, v in b["pause_s"].items()
                 if v - a["pause_s"].get(k, 0.0) > 0}
        return {"queue_drops": b["queue_drops"] - a["queue_drops"], "pause_s": dict(sorted(pause.items())),
                "pauses": sum(b["pauses"].values()) - sum(a["pauses"].values()),
                "ecn_marked": sum(b["marks"].values()) - sum(a["marks"].values()),
                "steered": sum(b["steered"].values()) - sum(a["steered"].values())}

    final = series[-1][1]
    return {
        "lossless": lossless,
        "queue_drops": final["queue_drops"],
        "drops_by_port": final["drops"],
        "pause_s": dict(sorted(final["pause_s"].items())),
        "pauses": sum(final["pauses"].values()),
        "paused_directions": len(final["pause_s"]),
        "ecn_marked": {"total": sum(final["marks"].values()), "by_port": dict(sorted(final["marks"].items()))},
        # adaptive routing: packets moved onto each uplink (link direction) from the kernel's choice
        "steered": {"total": sum(final["steered"].values()), "by_port": dict(sorted(final["steered"].items()))},
        "host_socket_drops": final["host_socket_drops"],
        "kernel_backlog_drops": final["kernel_backlog_drops"],
        "fault_windows": [delta(before(start), after(end)) for start, end in windows],
        # the PFC controller at the end: its reaction times, CPU, events (lossless labs)
        "controller": next((r["controller"] for r in reversed(records)
                            if r["kind"] == "fabric" and "controller" in r), None),
    }


def paused_series(records: list[dict]) -> tuple[list[float], list[float]]:
    """(t, link directions held by PFC on average since the previous count) for the timeline:
    paused seconds of every direction per second, so pauses of a few ms still show."""
    from twin.telemetry.fabric import replay

    series = replay(records)
    times, values = [], []
    for (t0, a), (t1, b) in zip(series, series[1:]):
        if t1 > t0:
            paused = sum(v - a["pause_s"].get(k, 0.0) for k, v in b["pause_s"].items())
            times.append(t0)
            values.append(round(paused / (t1 - t0), 3))
    return times, values


def retransmission_series(records: list[dict], bin_s: float = 0.5) -> dict[str, tuple[list[float], list[float]]]:
    """workload -> (bin start times, MB the RoCE transport retransmitted in each bin, all ranks)."""
    bins: dict[str, dict[int, float]] = {}
    for r in records:
        if r["kind"] in ("collective", "hang") and "retrans_bytes" in r:
            bins.setdefault(r["workload"], {}).setdefault(int(r["t"] // bin_s), 0.0)
            bins[r["workload"]][int(r["t"] // bin_s)] += r["retrans_bytes"] / 1e6
    return {w: ([b * bin_s for b in sorted(v)], [round(v[b], 3) for b in sorted(v)]) for w, v in bins.items()}
