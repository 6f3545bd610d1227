"""`twin e2e --generated N --seed S`: N random-but-valid labs and fault scenarios, written as
ordinary lab and scenario files (so any one can be run again with `twin run`), for judging
detection on fabrics nobody tuned it on.

Labs: every shape the format allows, kept small enough to bring up in seconds on two cores
(2 or 3 tiers, 1-3 groups, 1-4 rails, 1-2 hosts per group, 1-3 spines per plane, 1-3
superspines, MTU 1500 or 9000, 100 or 200 Mbit/s). Drills, in turn (`KINDS`): a silent drop of
0.5-5 % on a random link and direction, a bit flip of 1-3 %, a black hole for one host on a
switch, a switch down, two concurrent silent drops, a drop of every packet of half the flows,
a healthy run under a busy all-ranks allreduce, a misconfiguration (one of the training
pools' level 4, drawn by its kind), and a failure outside the network (a hung, crashed or 1.5x
slow GPU under a 4-rank training job, which rank-health must name and the probe detectors must
not blame on the network). Link faults go only on links some leaf-to-leaf path crosses (a link
nothing crosses carries nothing to lose).

Every drill runs the probe mesh (pairs: cover) at a rate that gives each link direction about
PER_LINK_PPS probes/s, both probe detectors and config-audit, and expects its fault named within
`within_s` (healthy: no verdict).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

from twin.detect.builtins import BUILTINS
from twin.faults import engine
from twin.faults.registry import FAULTS
from twin.lab import runtime
from twin.model.build import build_fabric
from twin.model.targets import TargetError
from twin.probes.selection import PATHS_PER_LINK, cover_plan, plan, probe_load
from twin.spec.labfile import load_lab

KINDS = ("silent_drop", "bitflip", "blackhole", "switch_down", "two_faults", "flow_subset", "healthy", "misconfig",
         "gpu")
MAX_SWITCHES = 24  # a generated lab brings up in about 20 s here
PER_LINK_PPS = 150  # probes/s over each link direction (paths_per_link x 1000 / interval_ms)
# One echo in three: the fabric carries as many packets as 100 probes/s echoed each, for half as
# much evidence again (a 1 % drop loses a probe every 0.7 s a direction, not every 1 s).
RTT_EVERY = 3
# the drills' probes' reporting interval (the workload's default is 500): a verdict waits for whole intervals
DRILL_REPORT_MS = 250
MAX_PPS = 5000
ONSET_S, FAULT_S, TAIL_S = 6.0, 8.0, 4.0
HEALTHY_S = 90.0  # 7 healthy drills in 49 give the 10 healthy minutes a false-positive figure needs
PROBE_DETECTORS = [name for name in BUILTINS.names() if BUILTINS.get(name).localizer is not None]
# The operator's own tool, as the shipped switch-down drill runs it: a dead switch whose traffic
# reroutes at once loses too few probes to name, while its ports say so.
LINK_STATE = Path(__file__).resolve().parents[2] / "examples" / "detectors" / "link_state.py"
# Configuration is compared on every drill: the misconfigurations it must name, and silence on the rest.
CONFIG_DETECTORS = ["config-audit"]
# A failure outside the network (a hung, crashed or slow GPU) under a training job of RANKS ranks:
# rank-health must name the host; a probe detector's verdict there blames the network wrongly.
GPU_FAULTS = ("rank_hang", "rank_crash", "slow_compute")
RANKS = 4
SLOW_FACTOR, SLOW_FAULT_S, SLOW_WITHIN_S = 1.5, 30.0, 30.0
DETECTORS = PROBE_DETECTORS + CONFIG_DETECTORS + ["rank-health"] + (["link-state"] if LINK_STATE.is_file() else [])


@dataclass(frozen=True)
class Drill:
    scenario: Path
    kind: str  # one of KINDS; silent drops below 1 % are `silent_drop<1%`
    lab: str


# Shapes to draw from: any the format allows, or the hard ones (issue 33's held-out drills: a 2-tier
# fabric, or a single group), where few paths cross each link and links share them
SHAPES = ("any", "hard")


def random_shape(rng: random.Random, shapes: str = "any") -> dict:
    while True:
        tiers = rng.choice([2, 3])
        groups = rng.randint(1, 3)
        if shapes == "hard" and tiers == 3 and groups > 1:
            continue
        shape = {"tiers": tiers, "groups": groups, "rails": rng.randint(1, 4),
                 "hosts_per_group": rng.randint(1, 2), "spines_per_plane": rng.randint(1, 3)}
        if tiers == 3:
            shape["superspines"] = rng.randint(1, 3)
        leaves = shape["groups"] * shape["rails"]
        spines = shape["spines_per_plane"] * (shape["rails"] if tiers == 3 else 1)
        hosts = shape["groups"] * shape["hosts_per_group"]
        if leaves + spines + shape.get("superspines", 0) <= MAX_SWITCHES and hosts >= 2:
            return shape


def _dump(path: Path, document: dict) -> None:
    yaml = YAML()
    yaml.default_flow_style = None
    with open(path, "w") as handle:
        yaml.dump(document, handle)


def generate(count: int, seed: int, folder: Path, shapes: str = "any") -> list[Drill]:
    """Write `count` labs and scenarios into `folder` (labs of `shapes`, SHAPES); returns the drills
    in order."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    drills = []
    for number in range(1, count + 1):
        lab_name = f"gen-{number:02d}"
        lab_path = folder / f"{lab_name}.yaml"
        kind = KINDS[(number - 1) % len(KINDS)]
        drawn = None
        while drawn is None:  # a shape where no target of this kind can be told apart is drawn again
            _dump(lab_path, {"name": lab_name, "fabric": random_shape(rng, shapes),
                             "links": {"rate": rng.choice(["100mbit", "200mbit"]), "mtu": rng.choice([1500, 9000])},
                             "routing": {"bfd": {"interval_ms": 300, "multiplier": 3}}})
            fabric = build_fabric(load_lab(lab_path, runtime.names()))
            drawn = _scenario(kind, fabric, f"./{lab_path.name}", rng, number)
        scenario, label = drawn
        path = folder / f"{number:02d}-{scenario['name'].split('-', 1)[1]}.yaml"
        _dump(path, scenario)
        drills.append(Drill(path, label, lab_name))
    return drills


def _scenario(kind: str, fabric, lab_file: str, rng: random.Random, number: int) -> tuple[dict, str] | None:
    covering = cover_plan(fabric, PATHS_PER_LINK, seed=number)
    # Only where the fabric can tell the target apart: a link or switch no other shares its paths
    # with (one host per leaf behind one spine cannot be told from that spine's link).
    ambiguous = {name for group in covering.expected.ambiguous for name in group}
    crossed = sorted({name for name, _to in covering.expected.crossings} - ambiguous)
    interval_ms = max(10, round(PATHS_PER_LINK * 1000 / PER_LINK_PPS))
    checked = plan(fabric, "cover", k=PATHS_PER_LINK)  # the plan the scenario's load check weighs
    while probe_load(checked, interval_ms, DRILL_REPORT_MS)["probes_per_s"] > MAX_PPS:
        interval_ms += 5
    workloads: list[dict] = [{"kind": "probes", "interval_ms": interval_ms, "report_ms": DRILL_REPORT_MS,
                              "max_pps": MAX_PPS, "rtt_every": RTT_EVERY}]
    faults, label, within = [], kind, 5.0
    # (switch, host) pairs some probed flow crosses toward that host: a black hole or a dead
    # switch elsewhere would lose nothing (every leaf's route toward every host is probed)
    toward = [(to, flow[1].split(":")[0], leaving) for flow in covering.expected.flows + covering.expected.routes
              for (_name, to), (leaving, _next) in zip(covering.drawn[flow], covering.drawn[flow][1:])
              if fabric.nodes[to].is_switch]
    on_paths = sorted({(node, host) for node, host, leaving in toward if not {node, leaving} & ambiguous})
    if (kind in ("blackhole", "switch_down") and not on_paths) or (kind not in ("blackhole", "switch_down", "healthy")
                                                                   and len(crossed) < 2):
        return None

    def link_fault(fault_kind: str, **params) -> dict:
        link = rng.choice(crossed)
        return {"id": f"{fault_kind.replace('_', '-')}-{len(faults) + 1}", "kind": fault_kind, "link": link,
                "direction": rng.choice(["a_to_b", "b_to_a", "both"]), **params}

    if kind == "silent_drop":
        loss = round(rng.uniform(0.5, 5.0), 1)
        faults.append(link_fault("silent_drop", loss_pct=loss))
        if loss < 1:
            label, within = "silent_drop<1%", 10.0
    elif kind == "bitflip":
        faults.append(link_fault("bitflip", rate_pct=round(rng.uniform(1.0, 3.0), 1)))
    elif kind == "flow_subset":
        faults.append(link_fault("silent_drop", loss_pct=100, flows_pct=50))
    elif kind == "two_faults":
        first = link_fault("silent_drop", loss_pct=round(rng.uniform(1.0, 5.0), 1))
        faults.append(first)
        rest = [link for link in crossed if not set(link.split(" -- ")) & set(first["link"].split(" -- "))] or crossed
        second = link_fault("silent_drop", loss_pct=round(rng.uniform(1.0, 5.0), 1))
        second["link"] = rng.choice(rest)
        faults.append(second)
    elif kind == "blackhole":
        node, host = rng.choice(on_paths)
        faults.append({"id": "blackhole-1", "kind": "blackhole", "node": node, "host": host})
    elif kind == "switch_down":
        faults.append({"id": "switch-down-1", "kind": "switch_down", "node": rng.choice(on_paths)[0]})
    elif kind == "misconfig":
        entry = _misconfiguration(fabric, rng, crossed)
        if entry is None:
            return None
        faults.append({"id": "misconfig-1", **entry})
    elif kind == "gpu":
        drawn = _gpu_fault(fabric, rng)
        if drawn is None:
            return None
        entry, ranks = drawn
        faults.append(entry)
        workloads.append({"kind": "train", "size": "2MiB", "compute_ms": 100, "timeout_s": 3, "ranks": ranks})
        label, within = f"gpu:{entry['kind']}", SLOW_WITHIN_S if entry["kind"] == "slow_compute" else 10.0
    if kind == "healthy":
        workloads.append({"kind": "allreduce", "size": "8MiB", "ranks": "all"})
    fault_s = SLOW_FAULT_S if label == "gpu:slow_compute" else FAULT_S
    for fault in faults:
        fault.update(at_s=ONSET_S, duration_s=fault_s)
    expect: list[dict] = [{"detect": {"fault": f["id"], "within_s": within}} for f in faults]
    # counted over every detector of the run: at most one wrong verdict each (healthy: none)
    expect.append({"max_wrong_verdicts": 0 if kind == "healthy" else len(DETECTORS)})
    name = f"g{number:02d}-{kind.replace('_', '-')}"
    return {"name": name, "lab": lab_file, "duration_s": HEALTHY_S if kind == "healthy" else ONSET_S + fault_s + TAIL_S,
            "seed": number, "workloads": workloads, "faults": faults,
            "detectors": [{"builtin": d} for d in PROBE_DETECTORS + CONFIG_DETECTORS] +
                         ([{"builtin": "rank-health"}] if kind == "gpu" else []) +
                         ([{"command": ["python3", str(LINK_STATE)],
                            "name": "link-state"}] if LINK_STATE.is_file() else []),
            "expect": expect}, label


def _gpu_fault(fabric, rng: random.Random) -> tuple[dict, list[str]] | None:
    """A hung, crashed or slow GPU on one host, and the job's ranks: one on that host's NIC, the
    others on other hosts' NICs (None on a lab of one host: no job to compare the rank with)."""
    nics = sorted(f"{host}:{end.ifname}" for host, end in fabric.host_nics())
    hosts = sorted({nic.split(":")[0] for nic in nics})
    if len(hosts) < 2:
        return None
    host = rng.choice(hosts)
    mine = rng.choice([nic for nic in nics if nic.startswith(f"{host}:")])
    elsewhere = [nic for nic in nics if not nic.startswith(f"{host}:")]
    others = rng.sample(elsewhere, min(RANKS - 1, len(elsewhere)))
    kind = rng.choice(GPU_FAULTS)
    entry = {"id": kind.replace("_", "-") + "-1", "kind": kind, "node": host, "nic": mine.split(":")[1]}
    if kind == "slow_compute":
        entry["factor"] = SLOW_FACTOR
    return entry, [mine, *others]


def _misconfiguration(fabric, rng: random.Random, crossed: list[str]) -> dict | None:
    """One of the training pools' misconfigurations (level 4), drawn by the kind itself on the
    links some probed path crosses; kinds this lab cannot have (no switch with two paths to a host,
    no link between switches) give way to the others."""
    between_switches = [link for link in crossed if all(fabric.nodes[n].is_switch for n in link.split(" -- "))]
    kinds = sorted(name for name, kind in FAULTS.items() if kind.training_level == 4 and kind.trainable(fabric))
    rng.shuffle(kinds)
    for name in kinds:
        kind = FAULTS.get(name)
        try:
            entry = {"kind": name, **kind.training_entry(fabric, rng, between_switches)}
        except (IndexError, TargetError):  # nothing of this kind on this lab
            continue
        _timing, params = engine.parse({"id": "x", **entry})
        if not kind.check(fabric, params, None):
            return entry
    return None


@dataclass
class KindScore:
    kind: str
    drills: int = 0
    faults: int = 0
    found: int = 0
    right: int = 0
    wrong: int = 0
    healthy_s: float = 0.0
    after_end: int = 0  # verdicts received after the run's end: not graded, shown so a late runner is seen
    detect_s: list = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return round(self.right / (self.right + self.wrong), 3) if self.right + self.wrong else None

    @property
    def recall(self) -> float | None:
        return round(self.found / self.faults, 3) if self.faults else None

    def median_s(self) -> float | None:
        return round(statistics.median(self.detect_s), 2) if self.detect_s else None


def score(drills: list[Drill], outcomes: list, detector: str) -> list[KindScore]:
    """Per drill kind, for one detector: faults found, verdicts right and wrong, time to detect."""
    table: dict[str, KindScore] = {}
    for drill, outcome in zip(drills, outcomes):
        row = table.setdefault(drill.kind, KindScore(drill.kind))
        row.drills += 1
        report = outcome.report
        if report is None:
            continue
        graded = report.detectors.get(detector)
        row.faults += len(report.faults)
        if drill.kind == "healthy":
            row.healthy_s += report.duration_s
        if graded is None:
            continue
        row.found += len(graded.detect_s)
        row.right += graded.right
        row.after_end += graded.after_end
        row.wrong += graded.wrong
        row.detect_s += list(graded.detect_s.values())
    return [table[k] for k in sorted(table, key=lambda k: (KINDS.index(k.split("<")[0].split(":")[0]), k))]
