"""The PFC counters file as readers take it (lab/pfc/published.py)."""

import pytest

from twin.lab.pfc import published


def test_the_ports_held_now_are_read_from_the_rows_as_the_counters_say(tmp_path):
    (tmp_path / "pfc").mkdir()
    rows = {("spine-1", "eth1"): (published.PortCounters(paused=True, paused_for_s=0.4, rx_pause=3), 1.0),
            ("spine-1", "eth2"): (published.PortCounters(rx_pause=9), 2.0),
            ("leaf-g1-r1", "hs-g1h1"): (published.PortCounters(paused=True, paused_for_s=0.05), 0.05)}
    published.store(tmp_path, published.encode(12.5, rows, {}))
    document = published.read(tmp_path)
    expected = {port: c.paused_for_s for port, c in published.ports(document).items() if c.paused_for_s}
    assert published.paused_for(document) == expected == {("spine-1", "eth1"): 0.4, ("leaf-g1-r1", "hs-g1h1"): 0.05}
    assert published.paused_for(None) == {}


def test_a_publication_is_parsed_once_and_every_new_one_is_read_even_at_the_same_size(tmp_path):
    """read() shares the parsed document (and ports() its counters) until the file's bytes change:
    the runner's sampler, fabric watch and detectors read it several times a second. A new
    publication of the same length, written within the file system's timestamp tick, is still new."""
    (tmp_path / "pfc").mkdir()
    for rx_pause in (1, 2, 3):
        rows = {("spine-1", "eth1"): (published.PortCounters(rx_pause=rx_pause), 0.0)}
        published.store(tmp_path, published.encode(7.0, rows, {}))
        first, again = published.read(tmp_path), published.read(tmp_path)
        assert first is again and published.ports(first) is published.ports(again)
        assert published.ports(first)[("spine-1", "eth1")].rx_pause == rx_pause
    (tmp_path / "pfc" / published.FILE).unlink()
    assert published.read(tmp_path) is None


def test_the_publisher_stores_the_newest_publication_from_a_thread_of_its_own(tmp_path):
    """The controller hands publications to a thread (a write and rename waited up to 243 ms for
    the file system in its real-time loop); the newest one replaces one not yet stored, and the one
    submitted last is stored before close() returns."""
    (tmp_path / "pfc").mkdir()
    publisher = published.Publisher(tmp_path)
    for t in range(50):
        rows = {("spine-1", "eth1"): (published.PortCounters(rx_pause=t), 0.0)}
        publisher.submit(published.encode(float(t), rows, {}))
    publisher.close()
    document = published.read(tmp_path)
    assert document["t_mono"] == 49.0 and published.ports(document)[("spine-1", "eth1")].rx_pause == 49
    assert not list((tmp_path / "pfc").glob("*.tmp"))


@pytest.mark.parametrize(("policy", "priority", "expected"), [
    ("SCHED_FIFO", 50, [("SCHED_FIFO", 49)]),  # the controller's loop: one step below it
    ("SCHED_FIFO", 1, [("SCHED_FIFO", 1)]),
    ("SCHED_OTHER", 0, []),  # a creator at normal priority: left as it is
])
def test_the_publishing_thread_stays_real_time_one_step_below_its_creator(monkeypatch, policy, priority, expected):
    os = published.os
    calls = []
    monkeypatch.setattr(os, "sched_getscheduler", lambda pid: getattr(os, policy))
    monkeypatch.setattr(os, "sched_getparam", lambda pid: os.sched_param(priority))
    monkeypatch.setattr(os, "sched_setscheduler",
                        lambda pid, chosen, param: calls.append((chosen, param.sched_priority)))
    published.below_creator()
    assert calls == [(getattr(os, name), level) for name, level in expected]


def test_a_publication_that_cannot_be_stored_is_an_error_not_a_crash(tmp_path):
    publisher = published.Publisher(tmp_path / "gone")  # no pfc/ directory: the lab went
    publisher.submit(published.encode(1.0, {}, {}))
    publisher.close()
    assert publisher.errors and "cannot publish the counters" in publisher.errors[0]


@pytest.mark.parametrize(("phase", "feeders_held", "expected"), [
    (1, True, True),  # above XOFF, its feeders held
    (1, False, True),  # above XOFF, the XOFF event not yet acted on
    (2, True, True),  # below XON in the kernel, the XON not yet acted on: its feeders are still held
    (2, False, False),  # released
    (0, False, False),  # never paused
])
def test_a_queue_pauses_its_feeders_from_its_xoff_until_the_controller_releases_them(phase, feeders_held, expected):
    """The published `xoff` must not fall between the programs' XON and the controller's release:
    a port held by a switch showing no queue above XOFF is the pause localizer's evidence of a pause
    with no cause (detect/pauses.py)."""
    assert published.pausing(phase, feeders_held) is expected
