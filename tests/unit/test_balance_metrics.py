"""The load-balance figures of a run (results/balance.py) from its interface counters: MMR and
Jain's index per tier over the busy ECMP groups, in the busiest window; damaged lines skipped."""

import json
from pathlib import Path

from twin.lab import runtime
from twin.model.build import build_fabric
from twin.results.balance import load_balance
from twin.spec.labfile import load_lab

LABS = Path(__file__).resolve().parents[2] / "labs"
PORTS = ["leaf-g1-r1:sp-1", "leaf-g1-r1:sp-2", "leaf-g2-r1:sp-1", "leaf-g2-r1:sp-2"]


def write_metrics(folder: Path, per_second: list[list[int]]) -> None:
    """Samples every 0.5 s; per_second[k]: the bytes each of PORTS sends per second in second k."""
    lines = [json.dumps({"type": "header", "interfaces": PORTS, "fields": ["rx_bytes", "tx_bytes"]})]
    sent, t = [0] * len(PORTS), 100.0
    lines.append(json.dumps({"t_mono": t, "v": [[0, s] for s in sent]}))
    for rates in per_second:
        for _half in range(2):
            sent = [s + r // 2 for s, r in zip(sent, rates)]
            t += 0.5
            lines.append(json.dumps({"t_mono": t, "v": [[0, s] for s in sent]}))
            lines.append("{damaged")
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_an_uneven_group_in_the_busiest_second_is_measured(tmp_path):
    fabric = build_fabric(load_lab(LABS / "mini.yaml", runtime.names()))
    # second 0: quiet; second 1: leaf-g1-r1 even, leaf-g2-r1 all on one uplink; second 2: quiet again
    write_metrics(tmp_path, [[10, 10, 10, 10], [1000, 1000, 2000, 0], [10, 10, 0, 10]])
    leaf = load_balance(tmp_path, fabric)["leaf"]
    assert leaf["groups"] == 2 and leaf["busy_groups"] == 2 and leaf["bytes"] == 4000
    assert leaf["window_s"] == [1.0, 2.0]
    assert leaf["mmr_worst"] == 2.0 and leaf["jain_worst"] == 0.5  # one member idle, one with all of it
    assert leaf["mmr_mean"] == 1.5 and leaf["jain_mean"] == 0.75


def test_no_counters_no_figures(tmp_path):
    fabric = build_fabric(load_lab(LABS / "mini.yaml", runtime.names()))
    assert load_balance(tmp_path, fabric) is None
    write_metrics(tmp_path, [[0, 0, 0, 0]])
    assert load_balance(tmp_path, fabric) is None  # nothing sent: nothing to weigh
