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
