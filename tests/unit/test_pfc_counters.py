"""The PFC counters file as readers take it (lab/pfc/counters.py)."""

from twin.lab.pfc import counters


def test_the_ports_held_now_are_read_from_the_rows_as_the_counters_say(tmp_path):
    (tmp_path / "pfc").mkdir()
    rows = {("spine-1", "eth1"): (counters.PortCounters(paused=True, paused_for_s=0.4, rx_pause=3), 1.0),
            ("spine-1", "eth2"): (counters.PortCounters(rx_pause=9), 2.0),
            ("leaf-g1-r1", "hs-g1h1"): (counters.PortCounters(paused=True, paused_for_s=0.05), 0.05)}
    counters.write(tmp_path, 12.5, rows, {})
    document = counters.read(tmp_path)
    expected = {port: c.paused_for_s for port, c in counters.ports(document).items() if c.paused_for_s}
    assert counters.paused_for(document) == expected == {("spine-1", "eth1"): 0.4, ("leaf-g1-r1", "hs-g1h1"): 0.05}
    assert counters.paused_for(None) == {}
