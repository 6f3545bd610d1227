"""The report's `fabric` section from `fabric` events (running totals, changed directions only)."""

from twin.results.workloads import fabric, paused_series


def event(t, drops, pause_s, paused=()):
    return {"t": t, "kind": "fabric", "queue_drops": drops, "host_socket_drops": 0, "kernel_backlog_drops": 0,
            "paused": list(paused), "drops": {}, "pause_s": pause_s, "pauses": {k: 1 for k in pause_s}}


def test_totals_and_fault_windows_come_from_running_totals():
    records = [event(0.0, 0, {}),
               event(4.0, 0, {"a -> b": 0.5}),
               event(6.0, 3, {"c -> d": 1.0}),  # a -> b unchanged, so not repeated
               event(9.0, 3, {"a -> b": 2.0})]
    section = fabric(records, windows=[(5.0, 8.0)], lossless=True)
    assert section["queue_drops"] == 3
    assert section["pause_s"] == {"a -> b": 2.0, "c -> d": 1.0}
    window = section["fault_windows"][0]  # from the count before 5 s (t=4) to the first after 8 s (t=9)
    assert window["queue_drops"] == 3
    assert window["pause_s"] == {"a -> b": 1.5, "c -> d": 1.0}


def test_no_fabric_events_no_section():
    assert fabric([{"t": 1.0, "kind": "probe"}], [], lossless=False) is None


def test_paused_series_is_paused_seconds_per_second():
    records = [event(0.0, 0, {}), event(0.5, 0, {"a -> b": 0.25, "c -> d": 0.5})]
    assert paused_series(records) == ([0.0], [1.5])  # 0.75 paused-seconds in 0.5 s: 1.5 directions
