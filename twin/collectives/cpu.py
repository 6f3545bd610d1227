"""Per-core CPU use over an interval, from /proc/stat: shows whether the CPU, not the fabric,
limited a measurement."""

from __future__ import annotations


def _per_core() -> list[tuple[int, int]]:
    cores = []
    with open("/proc/stat") as handle:
        for line in handle:
            if line.startswith("cpu") and line[3].isdigit():
                values = [int(v) for v in line.split()[1:]]
                idle = values[3] + values[4]  # idle + iowait
                cores.append((sum(values), idle))
    return cores


class CpuMeter:
    def __init__(self) -> None:
        self.start = _per_core()

    def busy_pct(self) -> list[float]:
        now = _per_core()
        return [round(100.0 * (1 - (i1 - i0) / max(1, t1 - t0)), 1)
                for (t0, i0), (t1, i1) in zip(self.start, now)]
