"""How many probed paths crossed each fault's link or node while it was on, from the run's
probes.jsonl: a fault that no probed path crossed is out of the probes' sight whatever a probe
detector does (in a lab whose hosts all sit under one leaf, nothing a host sends crosses the
leaf's uplinks), and the report says so instead of leaving a `detect` expectation's failure
unexplained."""

from __future__ import annotations

from pathlib import Path

from twin.events import read_jsonl
from twin.model.targets import Target, TargetError
from twin.probes.mesh import PROBES_FILE


def crossing_paths(folder: Path, windows: list[tuple[float, float]], targets: list[list[str]],
                   span_s: float) -> list[int] | None:
    """Per fault (its active window and its targets, in the same order): the probed flows (source,
    destination, source port) whose traced path crossed one of its targets, a link or a link of a
    node, in a report interval ([t, t + span_s)) overlapping the window. None: the run probed nothing."""
    path = folder / PROBES_FILE
    if not path.is_file():
        return None
    faults = [[_target(t) for t in names] for names in targets]
    seen: list[set[tuple]] = [set() for _ in windows]
    links: dict[str, Target | None] = {}  # a path's link as probes.jsonl writes it -> parsed, once
    rows, _damage = read_jsonl(path, required=("t", "samples"))  # a line a crash cut is left out
    for row in rows:
        t, samples = row["t"], row["samples"]
        if not isinstance(t, int | float) or not isinstance(samples, list):
            continue
        for window, faulty, found in zip(windows, faults, seen):
            if not (t < window[1] and t + span_s > window[0]):
                continue
            for sample in samples:
                if not isinstance(sample, dict):
                    continue
                crossed = (_parsed(links, name) for name in sample.get("links") or () if isinstance(name, str))
                if any(link is not None and link.names(fault) for link in crossed for fault in faulty if fault):
                    found.add((sample.get("src"), sample.get("dst"), sample.get("sport")))
    return [len(found) for found in seen]


def _parsed(cache: dict[str, Target | None], name: str) -> Target | None:
    if name not in cache:
        cache[name] = _target(name)
    return cache[name]


def _target(name: str) -> Target | None:
    try:
        return Target.parse(name)
    except TargetError:
        return None
