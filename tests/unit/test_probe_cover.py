"""How many probed paths crossed a fault while it was on (results/probe_cover.py), from probes.jsonl rows."""

import json

from twin.probes.mesh import PROBES_FILE
from twin.results.probe_cover import crossing_paths


def sample(src: str, dst: str, sport: int, *links: str) -> dict:
    return {"src": src, "dst": dst, "sport": sport, "links": list(links), "sent": 10, "received": 10}


UP = sample("host-g1-h1:nic1", "host-g2-h1:nic1", 1000, "leaf-g1-r1 -- host-g1-h1", "leaf-g1-r1 -- spine-1",
            "leaf-g2-r1 -- spine-1", "leaf-g2-r1 -- host-g2-h1")
LOCAL = sample("host-g1-h1:nic1", "host-g1-h2:nic1", 2000, "leaf-g1-r1 -- host-g1-h1", "leaf-g1-r1 -- host-g1-h2")


def write(folder, rows) -> None:
    (folder / PROBES_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"t": 9.0, "samp')


def test_paths_over_a_faults_link_or_node_are_counted_in_its_window_only(tmp_path):
    write(tmp_path, [{"t": 0.0, "samples": [UP, LOCAL]}, {"t": 5.0, "samples": [UP, LOCAL]},
                     {"t": 5.5, "samples": [UP, dict(UP, sport=1001)]}])
    counts = crossing_paths(tmp_path, [(5.0, 6.0), (5.0, 6.0), (5.0, 6.0), (1.0, 4.0)],
                            [["spine-1 -- leaf-g1-r1"],  # written the other way round: the same link
                             ["spine-1"],  # a node: the paths over its links
                             ["leaf-g1-r2 -- spine-1"],  # nothing probed crosses it
                             ["spine-1"]],  # a window with no interval in it
                            span_s=0.5)
    assert counts == [2, 2, 0, 0]


def test_an_interval_that_began_before_the_fault_overlaps_it(tmp_path):
    write(tmp_path, [{"t": 4.75, "samples": [UP]}])
    assert crossing_paths(tmp_path, [(5.0, 5.2)], [["leaf-g1-r1 -- spine-1"]], span_s=0.5) == [1]
    assert crossing_paths(tmp_path, [(5.0, 5.2)], [["leaf-g1-r1 -- spine-1"]], span_s=0.25) == [0]


def test_a_run_without_probes_says_nothing_and_garbage_is_skipped(tmp_path):
    assert crossing_paths(tmp_path, [(0.0, 1.0)], [["spine-1"]], span_s=0.5) is None
    (tmp_path / PROBES_FILE).write_text('[1, 2]\n{"t": "x", "samples": []}\n{"t": 0.1, "samples": [3, '
                                        '{"links": [7, "not a link --", "spine-1 -- leaf-g1-r1"]}]}\n')
    assert crossing_paths(tmp_path, [(0.0, 1.0)], [["spine-1"]], span_s=0.5) == [1]
