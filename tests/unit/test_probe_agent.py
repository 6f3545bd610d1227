"""The probe agent's bookkeeping (no sockets): a bucket's receipts are written, and the bucket
marked final, only once its grace has passed before the agent last read its sockets."""

import json
import socket
import time

from twin.probes.agent import Agent


def agent(tmp_path) -> Agent:
    config = {"epoch": 100.0, "interval_ms": 10, "report_ms": 250, "grace_s": 0.5, "nics": ["a:nic1", "b:nic1"],
              "output": str(tmp_path / "agent.jsonl"), "pairs": []}
    return Agent(config)


def lines(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "agent.jsonl").read_text().splitlines()]


def test_a_bucket_is_final_only_once_its_grace_passed_before_the_last_read(tmp_path):
    probe = agent(tmp_path)
    probe.received[0][(0, 1, 10000)].append(0.001)  # bucket 0: [100.0, 100.25); final after 100.75
    # Off the CPU from 100.70 to 102.0: the clock is past the grace, the sockets were last read before it.
    probe._flush(now=102.0, read_until=100.70)
    assert [r["type"] for r in lines(tmp_path)] == []
    probe._flush(now=102.1, read_until=102.05)
    written = lines(tmp_path)
    assert [r["type"] for r in written] == ["recv", "mark"]
    assert written[0]["b"] == 0 and written[1]["b"] == int((102.05 - 0.5 - 100.0) / 0.25) - 1


def test_sent_rows_follow_the_clock_and_the_end_writes_everything(tmp_path):
    probe = agent(tmp_path)
    probe.sent[0][(0, 1, 10000)] += 3
    probe.received[1][(0, 1, 10000)].append(0.001)
    probe._flush(now=100.31, read_until=100.30)
    assert [r["type"] for r in lines(tmp_path)] == ["sent"]
    probe._flush(float("inf"), float("inf"))
    assert [r["type"] for r in lines(tmp_path)] == ["sent", "recv", "mark"]


def test_each_round_probes_a_path_from_the_next_port_discovery_found_on_it(tmp_path):
    """Ports 10000, 10002 and 10003 crossed the same switches, 10001 another way, 10004 past a
    silent hop: the flow on 10000 is probed from 10000, 10002, 10003 in turn, always as 10000."""
    probe = agent(tmp_path)
    probe.pairs = [{"src": "a:nic1", "dst": "b:nic1", "dst_address": "10.0.0.2", "hops": 3,
                    "sports": [10000, 10001, 10002, 10003, 10004]}]
    probe.senders = {("a:nic1", port): f"socket {port}" for port in range(10000, 10005)}
    ways = {10000: ["s1", "t1"], 10001: ["s2", "t1"], 10002: ["s1", "t1"], 10003: ["s1", "t1"], 10004: ["s1", None]}
    probe.trace_answers = {(0, 1, port): {2: hops[0], 3: hops[1]} for port, hops in ways.items()}
    probe._publish_paths()
    sent = []
    probe._send = lambda sock, _address, _kind, _ttl, _src, _dst, sport, _now: sent.append((sock, sport))
    for round_number in range(5):  # five rounds of the active flows, each on time
        probe._send_due(probe.base + (round_number + 0.99) * probe.interval)
    from_10000 = [sock for sock, sport in sent if sport == 10000]
    assert from_10000 == ["socket 10000", "socket 10002", "socket 10003", "socket 10000", "socket 10002"]
    assert {sock for sock, sport in sent if sport == 10001} == {"socket 10001"}  # alone on its path


def test_a_flow_testing_a_route_is_probed_in_one_interval_of_those_the_selection_says(tmp_path):
    """The mesh lists a route's flow with a fourth number: it is probed in one round of that many,
    the others every round, and the slots keep their places in the interval."""
    probe = agent(tmp_path)
    probe.config["select"] = str(tmp_path / "select.json")
    probe.pairs = [{"src": "a:nic1", "dst": "b:nic1", "dst_address": "10.0.0.2", "hops": 3, "sports": [10000, 10001]}]
    probe.senders = {("a:nic1", port): f"socket {port}" for port in (10000, 10001)}
    (tmp_path / "select.json").write_text(json.dumps([["a:nic1", "b:nic1", 10000], ["a:nic1", "b:nic1", 10001, 5]]))
    probe.load_selection()
    sent = []
    probe._send = lambda _sock, _address, _kind, _ttl, _src, _dst, sport, now: sent.append((round(now, 4), sport))
    for round_number in range(10):
        probe._send_due(probe.base + (round_number + 0.99) * probe.interval)
    assert [sport for _t, sport in sent].count(10000) == 10
    route = [t for t, sport in sent if sport == 10001]
    assert len(route) == 2 and round(route[1] - route[0], 4) == round(5 * probe.interval, 4)


def test_a_focused_flow_is_probed_times_an_interval_evenly_and_a_new_selection_keeps_the_rounds_phase(tmp_path,
                                                                                                  monkeypatch):
    """[src, dst, sport, every, times]: the mesh focuses on a flow over a lossy path; its probes are
    spread over the interval between the others', and the change does not restart the round (a new
    round at once probed every flow twice in that interval).

    The agent's clock is the test's, and every instant the test gives is off the slots' due times:
    on one, whether a slot was due came down to how a float rounded, which the machine's monotonic
    clock decided (CI of 2026-11-30 failed on a slot at 0.6 of the interval, sent or not)."""
    import twin.probes.agent as agent_module

    start = 1000.0
    probe = agent(tmp_path)
    probe.config["select"] = str(tmp_path / "select.json")
    probe.pairs = [{"src": "a:nic1", "dst": "b:nic1", "dst_address": "10.0.0.2", "hops": 3, "sports": [10000, 10001]}]
    probe.senders = {("a:nic1", port): f"socket {port}" for port in (10000, 10001)}
    (tmp_path / "select.json").write_text(json.dumps([["a:nic1", "b:nic1", 10000, 1, 1],
                                                      ["a:nic1", "b:nic1", 10001, 1, 1]]))
    monkeypatch.setattr(agent_module.time, "monotonic", lambda: start)
    probe.load_selection()
    assert probe.base == start
    sent = []
    probe._send = lambda _sock, _address, _kind, _ttl, _src, _dst, sport, now: sent.append((now, sport))
    probe._send_due(start + 0.6 * probe.interval)  # 10000 at 0, 10001 at half the interval
    assert [sport for _t, sport in sent] == [10000, 10001]
    (tmp_path / "select.json").write_text(json.dumps([["a:nic1", "b:nic1", 10000, 1, 1],
                                                      ["a:nic1", "b:nic1", 10001, 1, 4]]))
    monkeypatch.setattr(agent_module.time, "monotonic", lambda: start + 0.55 * probe.interval)  # between slots
    probe.load_selection()
    assert abs(probe.base - start) < 1e-9  # the same round goes on
    sent.clear()
    for step in range(13, 81):  # the clock in steps of a twentieth of the interval (just after each), to round 4's end
        probe._send_due(start + (step + 0.01) * probe.interval / 20)
    per_round = [[sport for t, sport in sent if start + r * probe.interval <= t < start + (r + 1) * probe.interval]
                 for r in range(4)]
    assert per_round[0] == [10001, 10001]  # the rest of the first round, in the new order: not 10000 again
    assert all(sorted(r) == [10000] + [10001] * 4 for r in per_round[1:])
    focused = [t for t, sport in sent if sport == 10001]
    assert max(b - a for a, b in zip(focused, focused[1:])) <= 0.4 * probe.interval + 1e-9  # spread, not bunched


def test_a_probe_whose_echo_is_late_is_reported_missed_at_once_and_only_once(tmp_path):
    """watch_echoes: an echo ECHO_WAIT_S late at the last read names its flow in a `miss` record,
    before its bucket is counted; an answered probe, or one not yet that late, does not."""
    from twin.probes.agent import ECHO, ECHO_WAIT_S, HEADER, MAGIC, PAYLOAD

    probe = agent(tmp_path)
    probe.config["select"] = str(tmp_path / "select.json")
    probe.awaiting = __import__("collections").OrderedDict()
    probe.pairs = [{"src": "a:nic1", "dst": "b:nic1", "dst_address": "10.0.0.2", "hops": 3, "sports": [10000, 10001]}]
    probe.senders = {("a:nic1", port): f"socket {port}" for port in (10000, 10001)}
    (tmp_path / "select.json").write_text(json.dumps([["a:nic1", "b:nic1", 10000], ["a:nic1", "b:nic1", 10001]]))
    probe.load_selection()

    def send(_sock, _address, _kind, _ttl, _src, _dst, _sport, _now):
        probe.seq += 1
    probe._send = send
    start = probe.base
    probe._send_due(start + 0.99 * probe.interval)  # seq 1 on 10000, seq 2 on 10001

    class Echoes:  # the sender's socket: the echo of seq 1 came back
        def __init__(self):
            self.data = [(MAGIC + bytes([ECHO]) + HEADER.pack(MAGIC, 1, 64, 0, 1, 10000, 1, start)[5:]).ljust(PAYLOAD,
                                                                                                             b"\0")]

        def recvmsg(self, _size, _ancillary_size, flags=0):
            if flags & socket.MSG_ERRQUEUE or not self.data:  # no ICMP error queued
                raise BlockingIOError
            return self.data.pop(), [], 0, ("10.0.0.2", 47100)
    probe._read("tx", Echoes(), start + 0.01)
    probe._report_missed(start + ECHO_WAIT_S / 2)
    assert not [r for r in lines(tmp_path) if r["type"] == "miss"]
    probe._report_missed(start + probe.interval + ECHO_WAIT_S)
    probe._report_missed(start + probe.interval + 2 * ECHO_WAIT_S)
    assert [r["flows"] for r in lines(tmp_path) if r["type"] == "miss"] == [[["a:nic1", "b:nic1", 10001]]]


def test_a_port_whose_probes_a_fault_drops_stays_with_its_siblings(tmp_path):
    """Rediscovered during a fault that drops 10002's 5-tuple (its TTL probes die at the faulty
    link: no hop answers) it keeps probing the path; 10003 now answers from another switch: it
    leaves; 10004, silent and never a sibling, does not join."""
    probe = agent(tmp_path)
    probe.pairs = [{"src": "a:nic1", "dst": "b:nic1", "dst_address": "10.0.0.2", "hops": 3,
                    "sports": [10000, 10002, 10003, 10004]}]
    probe.senders = {("a:nic1", port): f"socket {port}" for port in range(10000, 10005)}

    def discover(ways):
        probe.trace_answers = {(0, 1, port): {2: hops[0], 3: hops[1]} for port, hops in ways.items()}
        probe._publish_paths()
        return probe.siblings[("a:nic1", "b:nic1", 10000)]

    assert discover({10000: ["s1", "t1"], 10002: ["s1", "t1"], 10003: ["s1", "t1"], 10004: ["s1", None]}) == \
        [10000, 10002, 10003]
    assert discover({10000: ["s1", "t1"], 10002: [None, None], 10003: ["s2", None], 10004: ["s1", None]}) == \
        [10000, 10002]


def test_a_periodic_refresh_traces_the_probed_flows_and_all_again_only_when_one_moved(tmp_path):
    """A cover agent's periodic check traces the probed flow's own port, not every candidate (nor
    its siblings: about ten a flow at pod128); a traced port found on another path starts a full
    discovery."""
    probe = agent(tmp_path)
    probe.config.update({"refresh_s": 30.0, "select": str(tmp_path / "select.json")})
    probe.pairs = [{"src": "a:nic1", "dst": "b:nic1", "dst_address": "10.0.0.2", "hops": 3,
                    "sports": [10000, 10001, 10002]}]
    probe.senders = {("a:nic1", port): f"socket {port}" for port in range(10000, 10003)}
    ways = {10000: ["s1", "t1"], 10001: ["s2", "t1"], 10002: ["s1", "t1"]}
    probe.trace_answers = {(0, 1, port): {2: hops[0], 3: hops[1]} for port, hops in ways.items()}
    probe.selected = {("a:nic1", "b:nic1"): {10000: (1, 1)}}
    probe._publish_paths()
    probe.start_discovery(full=False)
    assert {(sport, ttl) for _pair, _s, _d, sport, ttl in probe.trace_queue} == {(10000, 2), (10000, 3)}
    published = len(lines(tmp_path))

    def answer(ways):
        for port, hops in ways.items():
            probe.trace_answers[(0, 1, port)] = {2: hops[0], 3: hops[1]}
        probe.trace_queue = []
        probe._finish_discovery_round()

    answer({10000: ["s1", "t1"]})  # nothing moved: nothing to tell, nothing more to trace
    assert len(lines(tmp_path)) == published and probe.trace_queue == [] and probe.tracing is not None
    probe.start_discovery(full=False)
    answer({10000: ["s3", "t1"]})  # the flow moved: every candidate again
    assert probe.tracing is None and {sport for _p, _s, _d, sport, _t in probe.trace_queue} == {10000, 10001, 10002}


def test_a_round_trip_is_the_fabrics_not_the_agents_waits_for_a_cpu(tmp_path):
    """Both agents read their sockets 50 ms after the datagram came (kept off the CPU by the
    machine's other work): the round trip counts from the kernel's receive times and the echo
    says how long its agent held the probe (TWAMP's T3 - T2), so neither wait is in the RTT; the
    one-way delay counts from the receive time too. Real sockets on the loopback."""
    from twin.probes.agent import HEADER, MAGIC, PAYLOAD, PROBE

    probe = agent(tmp_path)
    nic = {"address": "127.0.0.1", "ifname": "lo"}
    receiver, sender = probe._socket(nic, 0, receiver=True), probe._socket(nic, 0)
    try:
        _until_the_kernel_stamps_arrivals(sender, receiver)
        sent_at = time.monotonic()
        sender.sendto(HEADER.pack(MAGIC, PROBE, 64, 0, 1, 10000, 1, sent_at).ljust(PAYLOAD, b"\0"),
                      receiver.getsockname())
        time.sleep(0.05)
        probe._read("rx", receiver, time.monotonic())
        time.sleep(0.05)
        probe._read("tx", sender, time.monotonic())
        waited = time.monotonic() - sent_at
    finally:
        receiver.close()
        sender.close()
    [one_way] = [d for flows in probe.received.values() for delays in flows.values() for d in delays]
    [rtt] = [r for flows in probe.rtts.values() for rtts in flows.values() for r in rtts]
    assert waited >= 0.1
    assert 0 <= one_way < 0.05 and 0 <= rtt < 0.05, (one_way, rtt)


def _until_the_kernel_stamps_arrivals(sender, receiver, within_s: float = 10.0) -> None:
    """The kernel turns receive stamps on for the machine after the first socket asks (a static
    key, switched by a work item), and a datagram that arrives before then is stamped when it is
    read: CI's loaded machine measured the test's own 50 ms wait (50.19 ms one way). Datagrams
    read 20 ms after they were sent until one carries its arrival time, as every later one will."""
    from twin.sockopts import ARRIVAL_SPACE, arrival_time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        sent = time.time()
        sender.sendto(b"warm-up", receiver.getsockname())
        time.sleep(0.02)
        try:
            _data, ancillary, _flags, _peer = receiver.recvmsg(64, ARRIVAL_SPACE)
        except BlockingIOError:  # not delivered yet: the machine is that busy
            continue
        stamped = arrival_time(ancillary)
        if stamped is not None and stamped - sent < 0.01:
            return
    raise AssertionError(f"the kernel stamped no datagram on its arrival within {within_s} s")
