"""How the probe mesh counts agents' records: a bucket is counted once every agent has marked
it, however late this process reads the files; an agent far behind the others is not waited
for, and what it has not answered is unreported, not lost; probes answered are never counted lost."""

import json
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from test_model import fabric_of

from twin.probes.focus import Focus
from twin.probes.mesh import SELECTION, STUCK_AGENT_S, Interval, PathSample, ProbeMesh
from twin.probes.select import Selection

REPORT_MS = 250
HOSTS = ("host-g1-h1", "host-g2-h1")
SRC, DST = "host-g1-h1:nic1", "host-g2-h1:nic1"


def mesh_on(tmp_path: Path) -> tuple[ProbeMesh, list]:
    fabric = fabric_of("rail4")
    lab = SimpleNamespace(fabric=fabric, state=SimpleNamespace(lab="rail4", directory=tmp_path),
                          paths=SimpleNamespace(root=tmp_path))
    directory = tmp_path / "probes" / "m"
    directory.mkdir(parents=True)
    for host in HOSTS:
        (directory / f"{host}.json").write_text(json.dumps({
            "epoch": 0.0, "interval_ms": 100, "report_ms": REPORT_MS, "grace_s": 0.5,
            "output": str(directory / f"{host}.jsonl")}))
        write(directory, host, {"type": "start", "t": 0.0, "pid": 1, "senders": 1})
    mesh = ProbeMesh.following(lab, directory)
    mesh.unfollow()  # the test drains by hand
    counted = []
    mesh.listeners.append(counted.append)
    write(directory, "host-g1-h1", {"type": "paths", "t": 0.0, "src": SRC, "dst": DST,
                                    "paths": {"5000": ["10.0.0.1", "10.0.0.3"]}, "active": [5000]})
    return mesh, counted


def write(directory: Path, host: str, *records: dict) -> None:
    with open(directory / f"{host}.jsonl", "a") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")


def bucket(directory: Path, b: int, received: bool = True, sender_marks: bool = True) -> None:
    """One bucket of one probe path: the sender's row and mark, the receiver's row and mark."""
    write(directory, "host-g1-h1", {"type": "sent", "b": b, "rows": [[SRC, DST, 5000, 3]]},
          *([{"type": "mark", "b": b}] if sender_marks else []))
    if received:
        write(directory, "host-g2-h1", {"type": "recv", "b": b, "rows": [[SRC, DST, 5000, 3, 1.0, 1.2, 1.3]]},
              {"type": "mark", "b": b})


def test_counts_a_bucket_only_once_every_agent_marked_it(tmp_path):
    mesh, counted = mesh_on(tmp_path)
    directory = mesh.directory
    for b in range(4):
        bucket(directory, b)
    bucket(directory, 4, received=False)  # the receiver has not written bucket 4 yet
    mesh._drain()
    assert [i.bucket for i in counted] == [0, 1, 2, 3]
    # However late the receiver's rows come (this process was kept off the CPU), nothing is lost.
    write(directory, "host-g2-h1", {"type": "recv", "b": 4, "rows": [[SRC, DST, 5000, 3, 1.0, 1.2, 1.3]]},
          {"type": "mark", "b": 4})
    mesh._drain()
    assert [i.bucket for i in counted] == [0, 1, 2, 3, 4]
    assert all(s.lost == 0 and s.received == 3 for i in counted for s in i.samples)
    assert mesh.late_rows == 0


def test_an_agent_far_behind_is_not_waited_for(tmp_path):
    mesh, counted = mesh_on(tmp_path)
    directory = mesh.directory
    behind = int(STUCK_AGENT_S * 1000 / REPORT_MS) + 2
    bucket(directory, 0)
    for b in range(1, behind + 1):  # the receiver stops writing after bucket 0
        bucket(directory, b, received=False)
    mesh._drain()
    assert counted, "a stuck agent held every interval back"
    assert counted[0].samples[0].lost == 0
    # What the stuck agent had not answered when the intervals were counted is unknown, not
    # lost: a starved agent is no evidence against the links toward it.
    assert sum(s.lost for i in counted for s in i.samples) == 0
    assert sum(s.unreported for i in counted[1:] for s in i.samples) == 3 * (len(counted) - 1)
    assert max(i.bucket for i in counted) == behind  # what the others marked is counted


def test_an_agent_read_before_the_others_is_read_again_before_it_is_left_out(tmp_path):
    """This thread may be held for seconds between reading two agents' files: the one read
    first then looks far behind, though it has written everything since."""
    mesh, counted = mesh_on(tmp_path)
    directory = mesh.directory
    ahead = int(STUCK_AGENT_S * 1000 / REPORT_MS) + 4
    bucket(directory, 0)
    receiver, sender = mesh.logs["host-g2-h1"], mesh.logs["host-g1-h1"]
    read_sender = sender.read

    def sender_read_later():  # while this thread was held, the receiver wrote its buckets
        for b in range(1, ahead + 1):
            write(directory, "host-g2-h1", {"type": "recv", "b": b, "rows": [[SRC, DST, 5000, 3, 1.0, 1.2, 1.3]]},
                  {"type": "mark", "b": b})
        return read_sender()

    for b in range(1, ahead + 1):
        bucket(directory, b, received=False)
    mesh.logs = {"host-g2-h1": receiver, "host-g1-h1": SimpleNamespace(read=sender_read_later)}
    mesh._drain()
    assert [i.bucket for i in counted] == list(range(ahead + 1))
    assert sum(s.lost for i in counted for s in i.samples) == 0


def test_a_failed_agents_log_outlives_the_mesh(tmp_path):
    mesh, _counted = mesh_on(tmp_path)
    (mesh.directory / "host-g1-h1.log").write_text("Traceback (most recent call last):\nOSError: boom\n")
    (mesh.directory / "host-g2-h1.log").write_text("")  # said nothing: not kept
    mesh.keep_logs = tmp_path / "results" / "probe-agents"
    hint = mesh._logs_hint("host-g1-h1")
    assert "OSError: boom" in hint and str(mesh.keep_logs) in hint
    assert sorted(p.name for p in mesh.keep_logs.iterdir()) == ["host-g1-h1.log"]


def test_agents_stopping_while_a_late_drain_counts_loses_nothing_it_had_not_read(tmp_path):
    """stop() says the agents are done while the follower, far behind, may be inside a drain
    between reading the files and counting: buckets the receiver's file had not been read for must
    not be counted then (they were, as lost, in a busy healthy run)."""
    import threading
    mesh, counted = mesh_on(tmp_path)
    directory = mesh.directory
    for b in range(3):
        bucket(directory, b)
    bucket(directory, 3, received=False)  # the receiver's rows for 3 come after this drain read
    stopping = []

    def stop_meanwhile() -> None:  # what stop() does from its own thread, mid-drain
        thread = threading.Thread(target=mesh._agents_stopped)
        thread.start()
        thread.join(timeout=0.3)  # blocked by the drain's lock, as it must be
        stopping.append(thread)

    mesh._note_pauses = stop_meanwhile  # called between the reads and the count
    mesh._drain()
    assert [i.bucket for i in counted] == [0, 1, 2]
    assert all(s.lost == 0 for i in counted for s in i.samples)
    stopping[0].join()
    del mesh._note_pauses
    write(directory, "host-g2-h1", {"type": "recv", "b": 3, "rows": [[SRC, DST, 5000, 3, 1.0, 1.2, 1.3]]},
          {"type": "mark", "b": 3})
    mesh._drain()  # the agents are done: everything is counted, with every row read
    assert [i.bucket for i in counted] == [0, 1, 2, 3]
    assert counted[-1].samples[0].lost == 0 and counted[-1].samples[0].received == 3


def test_a_rediscovery_that_moves_nothing_keeps_the_selection_and_is_told_to_nobody(tmp_path):
    """A pod128 rediscovery is 1,300 paths records, mostly the same: selecting again (2 s of CPU)
    and telling the run of each record held the follower back a minute. Only a moved path does."""
    mesh, _counted = mesh_on(tmp_path)
    told, selections = [], []
    mesh.path_listeners.append(told.append)
    mesh._select = lambda: selections.append(1) or setattr(mesh, "_selected_at", time.monotonic())
    mesh.selection = object()  # a cover mesh
    mesh._drain()  # the first discovery
    import twin.probes.mesh as mesh_module
    quiet = mesh_module.RESELECT_QUIET_S
    mesh_module.RESELECT_QUIET_S = 0.0
    try:
        mesh._drain()
        assert (len(told), len(selections)) == (1, 1)
        same = {"type": "paths", "t": 1.0, "src": SRC, "dst": DST, "paths": {"5000": ["10.0.0.1", "10.0.0.3"]},
                "active": [5000]}
        write(mesh.directory, "host-g1-h1", same)
        mesh._drain()
        mesh._drain()
        assert (len(told), len(selections)) == (1, 1)  # the selection stands, and is current again
        assert mesh._selected_at >= mesh._discovered_at
        write(mesh.directory, "host-g1-h1", {**same, "t": 2.0, "paths": {"5000": ["10.0.0.3", "10.0.0.1"]}})
        mesh._paths_told = (0.0, mesh._paths_told[1])  # as if the last telling was long ago
        mesh._drain()
        mesh._drain()
        assert (len(told), len(selections)) == (2, 2)
    finally:
        mesh_module.RESELECT_QUIET_S = quiet


def test_a_flow_testing_a_route_is_written_with_its_pace_and_written_again_when_that_changes(tmp_path, monkeypatch):
    """The agents read a route's flow as [src, dst, sport, every] (one report interval: 250 ms at
    100 ms probing, every 2): a flow that moves from testing a route to covering links keeps its
    name, and its host is told all the same."""
    mesh, _ = mesh_on(tmp_path)
    mesh.paths_per_link, mesh.pids, mesh.plans = 3, {host: 999_999_999 for host in HOSTS}, []
    flow = (SRC, DST, 5000)
    picks = iter([Selection([], Counter(), routes=[flow]), Selection([flow], Counter())])
    monkeypatch.setattr("twin.probes.mesh.select", lambda *_args, **_kwargs: next(picks))
    written = mesh.directory / f"host-g1-h1{SELECTION}"
    mesh._select()
    assert json.loads(written.read_text()) == [[SRC, DST, 5000, 2, 1]]
    written.unlink()
    mesh._select()
    assert json.loads(written.read_text()) == [[SRC, DST, 5000, 1, 1]]


def test_a_lossy_interval_focuses_the_flows_over_its_links_for_a_while(tmp_path, monkeypatch):
    """A flow that lost probes: it and the selected flows over any directed link of its path are
    probed `focus` times an interval (their agents told), the others not; once the hold has
    passed without loss, all are back at one."""
    mesh, _ = mesh_on(tmp_path)
    mesh.paths_per_link, mesh.pids, mesh.plans = 3, {host: 999_999_999 for host in HOSTS}, []
    mesh.focus, mesh.max_pps = Focus(4, budget=0), 5000  # as a cover mesh with focus 4 starts
    lossy, beside, apart = (SRC, DST, 5000), (SRC, DST, 5001), ("host-g2-h1:nic2", "host-g1-h1:nic2", 5002)
    mesh.paths = {
        lossy: ("leaf-g1-r1 -- host-g1-h1", "spine-r1-s1 -- leaf-g1-r1", "spine-r1-s1 -- leaf-g2-r1",
                "leaf-g2-r1 -- host-g2-h1"),
        beside: ("leaf-g1-r1 -- host-g1-h1", "spine-r1-s2 -- leaf-g1-r1", "spine-r1-s2 -- leaf-g2-r1",
                 "leaf-g2-r1 -- host-g2-h1"),
        apart: ("leaf-g2-r2 -- host-g2-h1", "spine-r2-s1 -- leaf-g2-r2", "spine-r2-s1 -- leaf-g1-r2",
                "leaf-g1-r2 -- host-g1-h1")}
    monkeypatch.setattr("twin.probes.mesh.select", lambda *_args, **_kwargs: Selection([lossy, beside, apart],
                                                                                        Counter()))
    mesh._select()
    paces = lambda host: {tuple(row[:3]): row[4] for row in  # noqa: E731
                          json.loads((mesh.directory / f"{host}{SELECTION}").read_text())}
    assert set(paces("host-g1-h1").values()) == {1} and set(paces("host-g2-h1").values()) == {1}
    sample = lambda flow, lost: PathSample(*flow, mesh.paths[flow], 10, 10 - lost)  # noqa: E731
    mesh._refocus(Interval(0, 0.0, [sample(lossy, 2), sample(beside, 0), sample(apart, 0)]))
    assert paces("host-g1-h1") == {lossy: 4, beside: 4}  # the host link and the last hop are shared
    assert paces("host-g2-h1") == {apart: 1}  # no link of the lossy path, either way round
    mesh._refocus(Interval(1, 0.5, [sample(lossy, 0), sample(beside, 0), sample(apart, 0)]))
    assert paces("host-g1-h1") == {lossy: 4, beside: 4}  # held
    mesh.focus.until = dict.fromkeys(mesh.focus.until, time.monotonic())  # as if the hold had passed
    mesh._refocus(Interval(2, 1.0, [sample(lossy, 0), sample(beside, 0), sample(apart, 0)]))
    assert paces("host-g1-h1") == {lossy: 1, beside: 1}
    # an agent's missed echo focuses at the next drain, before any interval is counted
    write(mesh.directory, "host-g1-h1", {"type": "miss", "t": 2.0, "flows": [list(lossy)]})
    mesh._drain()
    assert paces("host-g1-h1") == {lossy: 4, beside: 4}


def test_flows_over_thin_directions_are_written_with_their_pace_and_a_focus_only_raises_it(tmp_path, monkeypatch):
    """A mesh with a floor of 2 probes an interval: the one flow over a direction no other selected
    flow crosses is probed twice an interval; a focus on it asks 4, and letting go returns it to 2."""
    mesh, _ = mesh_on(tmp_path)
    mesh.paths_per_link, mesh.pids, mesh.plans, mesh.floor = 1, {host: 999_999_999 for host in HOSTS}, [], 2
    mesh.focus, mesh.max_pps = Focus(4, budget=0), 5000
    alone, twin_a, twin_b = (SRC, DST, 5000), (SRC, DST, 5001), (SRC, DST, 5002)
    shared = ("leaf-g1-r1 -- host-g1-h1", "spine-r1-s2 -- leaf-g1-r1", "spine-r1-s2 -- leaf-g2-r1",
              "leaf-g2-r1 -- host-g2-h1")
    mesh.paths = {alone: ("leaf-g1-r1 -- host-g1-h1", "spine-r1-s1 -- leaf-g1-r1", "spine-r1-s1 -- leaf-g2-r1",
                          "leaf-g2-r1 -- host-g2-h1"), twin_a: shared, twin_b: shared}
    monkeypatch.setattr("twin.probes.mesh.select", lambda *_args, **_kwargs: Selection(
        [alone, twin_a, twin_b], Counter()))
    mesh._select()
    paces = lambda: {tuple(row[:3]): row[4] for row in  # noqa: E731
                     json.loads((mesh.directory / f"host-g1-h1{SELECTION}").read_text())}
    assert paces() == {alone: 2, twin_a: 1, twin_b: 1}  # spine-r1-s1's directions: alone crosses them
    assert mesh.selected()["paced_flows"] == 1
    mesh.focus.budget = 1
    mesh._refocus_on([alone])
    assert paces()[alone] == 4
    mesh.focus.until = dict.fromkeys(mesh.focus.until, time.monotonic())
    mesh._refocus_on([])
    assert paces()[alone] == 2
