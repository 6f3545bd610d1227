"""Mitigation on a real lab: hash dodging moves lossy flows to source ports whose discovered
paths avoid the bad link (and their loss stops, routing untouched); isolation drains the link a
detector names (BGP shut on both ends) and puts it back when the fault clears; `twin lab drain`
and `undrain` by hand. On both runtimes (on docker `vtysh` runs in the switch containers)."""

import json
import sys
import time
from pathlib import Path

import pytest

from twin.lab.state import load_state
from twin.lab.status import lab_status
from twin.model.fabric import link_key

from .helpers import DOCKER_LAB_PREFIX, lab_copy, lab_name, lab_running, leftovers, netns_tier_only, twin_cli

pytestmark = pytest.mark.integration
BAD = "leaf-g1-r1 -- spine-1"


def bad_optic(duration_s: float) -> str:
    """The scenario's faults: 5 % silent drop on BAD from 3 s."""
    return f"""faults:
  - id: bad
    kind: silent_drop
    link: {BAD}
    loss_pct: 5
    at_s: 3
    duration_s: {duration_s}
"""


def flows(pps: int, dodge: bool = False) -> str:
    """The scenario's workloads: 4 flows between every pair of NICs."""
    return f"""workloads:
  - kind: flows
    pps: {pps}
    flows_per_pair: 4
    dodge: {str(dodge).lower()}
"""


def links_of(path: list[str | None]) -> set[str]:
    """The links of a discovered path (None: a hop that did not answer), by key."""
    return {link_key(link) for link in path if link}


def controller(tmp_path, at_s: float, isolate: bool = False) -> str:
    """The scenario's detectors: an external one that names BAD at `at_s`."""
    script = tmp_path / "controller.py"
    script.write_text("import json, os, time\n"
                      "start = float(os.environ['FABRIC_TWIN_START_EPOCH'])\n"
                      f"time.sleep(max(0, start + {at_s} - time.time()))\n"
                      f"print(json.dumps({{'kind': 'silent_drop', 'link': '{BAD}'}}), flush=True)\n"
                      "time.sleep(60)\n")
    return f"""detectors:
  - command: ["{sys.executable}", "{script}"]
    name: controller
    isolate: {str(isolate).lower()}
"""


def run_scenario(tmp_path, text: str, *args: str) -> tuple[dict, list[dict], str]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(text)
    result = twin_cli("run", str(scenario), "--results", str(tmp_path / "results"), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "results").iterdir()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return json.loads((run_dir / "report.json").read_text()), events, result.stdout


def steady_bfd_mini(tmp_path, runtime) -> Path:
    """A copy of mini whose BFD sessions outlast the fault: at multiplier 3 a session goes down when
    three of its packets in a row are lost, which 5 % drop does about once in 8,000 packets, about
    one run in 120 (CI of 2026-12-07: BFD and BGP down on BAD 1.5 s after onset; the flows that had
    dodged onto spine-2 hashed back over BAD when BGP returned, and lost again: back after 6.4 s). At
    10 (0.05^10) routing stays untouched, which is what this test is about."""
    path = lab_copy(tmp_path, "mini", ("dodge" if runtime == "netns" else DOCKER_LAB_PREFIX + "dodge"))
    text = path.read_text()
    assert "bfd: {interval_ms: 300, multiplier: 3}" in text
    path.write_text(text.replace("bfd: {interval_ms: 300, multiplier: 3}", "bfd: {interval_ms: 300, multiplier: 10}"))
    return path


def test_hash_dodging_moves_lossy_flows_off_the_bad_link_and_their_loss_stops(tmp_path, runtime):
    lab = steady_bfd_mini(tmp_path, runtime)
    report, events, stdout = run_scenario(tmp_path, f"""name: dodge
lab: {lab}
duration_s: 14
{flows(50, dodge=True)}{bad_optic(9)}expect:
  - recover: {{workload: flows, within_s: 6}}
""", "--runtime", runtime)
    assert leftovers(lab_name(str(lab))) == []
    fault = report["faults"][0]
    moves = [e for e in events if e["kind"] == "dodge" and e["moved"]]
    assert moves and "hash dodging:" in stdout
    for move in moves:
        # a trace across the bad link may be lost
        assert link_key(BAD) in links_of(move["from_path"]) or None in move["from_path"]
        assert link_key(BAD) not in links_of(move["to_path"]), move  # found by discovery
        assert fault["applied_s"] <= move["t"] <= fault["cleared_s"]
        after = [r for r in events if r["kind"] == "flow" and r["flow"] == move["flow"]
                 and move["t"] < r["t"] and r["t"] + r["span_s"] <= fault["cleared_s"]]
        assert after and all(r["received"] == r["sent"] for r in after), (move["flow"], after)
    # routing never reacted (CI of 2026-11-30 saw 6 route changes once on the docker tier, not seen in
    # 5 runs here since: the message says whether BFD went down, and where)
    assert fault["route_changes"] == 0 and fault["bfd_downs"] == 0, \
        (fault["route_changes"], fault["bfd_downs"], [e for e in events if e["kind"] in ("bfd", "bgp")
                                                      and fault["applied_s"] <= e["t"] <= fault["cleared_s"]])
    assert report["expectations"][0]["status"] == "pass"


def test_a_verdict_moves_the_flows_crossing_the_named_link_before_they_lose_packets(tmp_path, runtime, lab_ref):
    """At 2 packets/s a flow's first loss at 5 % comes after 10 s on average: the flows that
    move soon after the controller names BAD (0.5 s after onset) are moved by the sweep."""
    netns_tier_only(runtime, "which flows a verdict moves is the dodger's choice; the hash-dodging test runs "
                             "its sockets and traces in the containers")
    report, events, stdout = run_scenario(tmp_path, f"""name: sweep
lab: {lab_ref("mini")}
duration_s: 10
{flows(2, dodge=True)}{bad_optic(5)}{controller(tmp_path, 3.5)}""", "--runtime", runtime)
    assert leftovers(lab_name(lab_ref("mini"))) == []
    (verdict,) = [e for e in events if e["kind"] == "verdict"]
    (sweep,) = [e for e in events if e["kind"] == "dodge_sweep"]  # one new name: one sweep
    assert verdict["t"] <= sweep["t"] < verdict["t"] + 1.5
    assert sweep["suspects"] == [link_key(BAD)] and sweep["crossing"] >= 1
    swept = [e for e in events if e["kind"] == "dodge" and e.get("trigger") == "verdict"]
    assert len(swept) == sweep["crossing"]  # each flow found crossing BAD was acted on
    for move in swept:
        assert move["because"] == "named by a detector" and sweep["t"] <= move["t"] < verdict["t"] + 1.5
        assert link_key(BAD) in links_of(move["from_path"])
    moved = [move for move in swept if move["moved"]]  # 8 fresh ports all on BAD: 1 in 256
    assert moved and all(link_key(BAD) not in links_of(move["to_path"]) for move in moved)
    assert report["mitigation"]["dodges"]["before_a_loss"] == len(moved)
    assert f"{len(moved)} before losing a packet" in stdout


def unhealthy_sessions(lab) -> list[tuple[str, str]]:
    return [(s.name, peer) for s in lab_status(lab) for peer, st in s.bgp.items() if st != "Established"]


def wait_for(check, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return value


@pytest.fixture(scope="module")
def mini(runtime, lab_ref):
    with lab_running(lab_ref("mini"), runtime) as lab:
        yield lab


def test_drain_and_undrain_by_hand(mini):
    fabric = mini.fabric
    refused = twin_cli("lab", "drain", fabric.name, "leaf-g1-r1 -- host-g1-h1")
    assert refused.returncode != 0 and "host link" in refused.stderr + refused.stdout
    drained = twin_cli("lab", "drain", fabric.name, "spine-1 -- leaf-g1-r1")
    assert drained.returncode == 0, drained.stderr
    assert load_state(fabric.name).drains == [link_key(BAD)]
    down = wait_for(lambda: sorted(n for n, _ in unhealthy_sessions(mini)))
    assert down == ["leaf-g1-r1", "spine-1"]  # the session, shut on both of its ends
    last = twin_cli("lab", "drain", fabric.name, "leaf-g1-r1 -- spine-2")
    assert last.returncode != 0 and "without a spine link" in last.stderr + last.stdout
    assert twin_cli("lab", "undrain", fabric.name, BAD).returncode == 0
    assert load_state(fabric.name).drains == []
    assert wait_for(lambda: not unhealthy_sessions(mini)), unhealthy_sessions(mini)


def test_isolation_drains_what_a_detector_names_and_restores_it_at_the_clear(mini, tmp_path, lab_ref, runtime):
    netns_tier_only(runtime, "isolation drains by the commands test_drain_and_undrain_by_hand runs on both")
    fabric = mini.fabric
    report, events, stdout = run_scenario(tmp_path, f"""name: isolation
lab: {lab_ref("mini")}
duration_s: 12
{flows(50)}{bad_optic(5)}{controller(tmp_path, 3.5, isolate=True)}expect:
  - recover: {{workload: flows, within_s: 3}}
""", "--keep")
    fault = report["faults"][0]
    steps = [(e["op"], link_key(e["link"])) for e in events if e["kind"] == "isolate"]
    assert steps == [("drained", link_key(BAD)), ("restored", link_key(BAD))]
    drained_at, restored_at = (e["t"] for e in events if e["kind"] == "isolate")
    assert fault["applied_s"] < drained_at < fault["applied_s"] + 1.5
    assert fault["cleared_s"] <= restored_at < fault["cleared_s"] + 1
    assert fault["bgp_downs"] >= 1 and fault["route_changes"] >= 1  # routing moved off the drained link
    assert report["expectations"][0]["status"] == "pass"
    assert "isolation: drained" in stdout
    assert load_state(fabric.name).drains == []  # put back into service: sessions come up again
    assert wait_for(lambda: not unhealthy_sessions(mini)), unhealthy_sessions(mini)
