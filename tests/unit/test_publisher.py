"""Publications of the real-time loops stored from a thread of their own (lab/publisher.py), and
the loops that use it."""

import json
import threading
from types import SimpleNamespace

import pytest

from twin.lab import publisher
from twin.lab.bfd.dataplane import DataPlane
from twin.lab.bfd.paths import STATS
from twin.lab.pfc import published


def test_the_publisher_stores_the_newest_publication_from_a_thread_of_its_own(tmp_path):
    """The newest publication replaces one not yet stored, and the one submitted last is stored
    before close() returns."""
    (tmp_path / "pfc").mkdir()
    writer = publisher.Publisher(published.path(tmp_path), "the counters")
    for t in range(50):
        rows = {("spine-1", "eth1"): (published.PortCounters(rx_pause=t), 0.0)}
        writer.submit(published.encode(float(t), rows, {}))
    writer.close()
    document = published.read(tmp_path)
    assert document["t_mono"] == 49.0 and published.ports(document)[("spine-1", "eth1")].rx_pause == 49
    assert not list((tmp_path / "pfc").glob("*.tmp"))


@pytest.mark.parametrize(("policy", "priority", "expected"), [
    ("SCHED_FIFO", 50, [("SCHED_FIFO", 49)]),  # the controller's loop: one step below it
    ("SCHED_FIFO", 1, [("SCHED_FIFO", 1)]),
    ("SCHED_OTHER", 0, []),  # a creator at normal priority: left as it is
])
def test_the_publishing_thread_stays_real_time_one_step_below_its_creator(monkeypatch, policy, priority, expected):
    os = publisher.os
    calls = []
    monkeypatch.setattr(os, "sched_getscheduler", lambda pid: getattr(os, policy))
    monkeypatch.setattr(os, "sched_getparam", lambda pid: os.sched_param(priority))
    monkeypatch.setattr(os, "sched_setscheduler",
                        lambda pid, chosen, param: calls.append((chosen, param.sched_priority)))
    publisher.below_creator()
    assert calls == [(getattr(os, name), level) for name, level in expected]


def test_a_publication_that_cannot_be_stored_is_an_error_not_a_crash(tmp_path):
    writer = publisher.Publisher(published.path(tmp_path / "gone"), "the counters")  # the lab went
    writer.submit(published.encode(1.0, {}, {}))
    writer.close()
    assert writer.errors and "cannot publish the counters" in writer.errors[0]


def test_the_bfd_data_plane_stores_its_statistics_off_its_loop(tmp_path, monkeypatch):
    """Its loop sends every switch's ticks: a rename that waited 0.6 s for the disk there stopped
    them, and the lab's sessions expired together (2026-12-07). Whatever waits, waits elsewhere."""
    stored = []
    monkeypatch.setattr(publisher, "store", lambda path, data: stored.append(
        (threading.current_thread(), path, json.loads(data))))
    plane = DataPlane(SimpleNamespace(paths=SimpleNamespace(root=tmp_path)))
    plane.start_publishing()
    plane._publish()
    plane.close()
    [(thread, path, document)] = stored
    assert thread is not threading.current_thread()
    assert path == tmp_path / "bfd" / STATS and document["sessions"] == 0
