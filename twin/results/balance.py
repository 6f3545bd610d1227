"""How evenly the fabric spread its load, in the vocabulary of the IETF's AI-fabric benchmarking
drafts: per tier, over the members of every busy ECMP group (model/balance.py), the max/mean
ratio of the bytes they sent (MMR, 1.0 is perfect) and Jain's fairness index (1.0 is perfect),
in the run's busiest window; from the interface counters the run sampled (metrics.jsonl).

A group is busy in the window when it sent at least BUSY_SHARE of what the busiest group of its
tier sent: a rail-aligned job leaves other planes idle, and an idle group is not unbalanced.
Idle members of a busy group count (a member the hash never picked is the imbalance).
"""

from __future__ import annotations

import json
from pathlib import Path

from twin.model.balance import ecmp_groups
from twin.model.fabric import Fabric

METRICS_FILE = "metrics.jsonl"
WINDOW_S = 1.0
BUSY_SHARE = 0.1
MAX_SAMPLES = 200_000  # a run of an hour at 20 ms: what is read of a longer or foreign file


def _samples(path: Path) -> tuple[list[str], list[str], list[tuple[float, list]]]:
    """(interfaces, fields, [(t_mono, values per interface)]); damaged lines are skipped."""
    interfaces, fields, rows = [], [], []
    with open(path) as handle:
        for number, line in enumerate(handle):
            if number > MAX_SAMPLES:
                break
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(row, dict):
                continue
            if row.get("type") == "header":
                interfaces, fields = row.get("interfaces", []), row.get("fields", [])
            elif isinstance(row.get("t_mono"), (int, float)) and isinstance(row.get("v"), list):
                rows.append((row["t_mono"], row["v"]))
    return interfaces, fields, rows


def figures(loads: list[int]) -> tuple[float, float]:
    """(max/mean, Jain's index) of the members' bytes."""
    mean = sum(loads) / len(loads)
    return max(loads) / mean, sum(loads) ** 2 / (len(loads) * sum(x * x for x in loads))


def load_balance(folder: Path, fabric: Fabric, window_s: float = WINDOW_S) -> dict | None:
    """Per tier (the groups' switches' role): busy groups, their worst and mean MMR and Jain's
    index, in the window of `window_s` where the tier sent most. None without counters."""
    path = folder / METRICS_FILE
    if not path.is_file():
        return None
    interfaces, fields, rows = _samples(path)
    if "tx_bytes" not in fields or len(rows) < 2:
        return None
    at, column = {name: i for i, name in enumerate(interfaces)}, fields.index("tx_bytes")

    def sent(row: list, port) -> int:
        values = row[at[f"{port.node}:{port.ifname}"]] if f"{port.node}:{port.ifname}" in at else None
        return values[column] if isinstance(values, list) and len(values) > column else 0

    tiers: dict[str, list[list]] = {}
    for switch, groups in ecmp_groups(fabric).items():
        tiers.setdefault(fabric.nodes[switch].role, []).extend(groups)
    start = rows[0][0]
    result = {}
    for tier, groups in sorted(tiers.items()):
        totals = [sum(sent(v, p) for g in groups for p in g) for _t, v in rows]
        best, best_bytes, first = None, -1, 0
        for last in range(1, len(rows)):
            while rows[last][0] - rows[first + 1][0] >= window_s and first + 1 < last:
                first += 1
            if totals[last] - totals[first] > best_bytes:
                best, best_bytes = (first, last), totals[last] - totals[first]
        if not best or best_bytes <= 0:
            continue
        a, b = rows[best[0]][1], rows[best[1]][1]
        loads = [[max(0, sent(b, p) - sent(a, p)) for p in g] for g in groups]
        busiest = max(sum(each) for each in loads)
        busy = [each for each in loads if sum(each) >= BUSY_SHARE * busiest and sum(each) > 0]
        measured = [figures(each) for each in busy]
        result[tier] = {"groups": len(groups), "busy_groups": len(busy),
                        "window_s": [round(rows[best[0]][0] - start, 2), round(rows[best[1]][0] - start, 2)],
                        "bytes": best_bytes,
                        "mmr_worst": round(max(m[0] for m in measured), 3),
                        "mmr_mean": round(sum(m[0] for m in measured) / len(measured), 3),
                        "jain_worst": round(min(m[1] for m in measured), 4),
                        "jain_mean": round(sum(m[1] for m in measured) / len(measured), 4)}
    return result or None
