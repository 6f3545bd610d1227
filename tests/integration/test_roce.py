"""The emulated RoCE transport on a real lab: correct and near line rate on a healthy fabric; a
1 % drop on its path costs it more than gloo over TCP, because every NAK resends a whole
window (go-back-N) and a lost tail waits for the timer; a link down longer
than the retry budget fails the QP with "retry count exceeded", which the runner reports as a
hang caused by a transport error, and a job with a longer budget survives the same outage. A
multipath QP sprays its data over the source ports of its entropy values, so a fabric that only
hashes (ECMP) spreads it over its paths too."""

import json

import pytest

from twin.collectives.bench import run_bench
from twin.collectives.incast import roce_incast
from twin.faults import engine
from twin.faults.base import FaultContext
from twin.lab.ports.counters import CounterReader
from twin.model.balance import uplinks
from twin.model.nics import fabric_nics
from twin.roce.nic import ENTROPY

from .helpers import lab_running, twin_cli

pytestmark = pytest.mark.integration
SIZE = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def mini():
    with lab_running("mini", "netns") as lab:
        yield lab


def bench(ctx, transport, iters=3, **roce):
    result = run_bench(ctx, "allreduce", [SIZE], iters=iters, warmup=1,
                       timeout_s=120, transport=transport, roce={"ib_timeout": 20, "retry_cnt": 7,
                                                                  "qps_per_connection": 2, "time_scale": 1.0, **roce})
    (measurement,) = result.measurements
    return measurement


# Throughput under DCQCN depends on the machine being quiet: with CPUs busy, a switch port's HTB
# shaper whose timer fires late loses that line time for good (its burst, 1600 bytes, is below
# one jumbo frame, so it cannot catch up), a queue builds behind it, ECN marks it and DCQCN cuts
# the QPs' rate. Measured on mini (8 MiB, 2 QPs): 0.89-0.94 of line alone; 0.73-0.89 beside two
# CPU hogs (0.92 with cc none; 0.83-0.93 with the switch ports' burst raised to 18000 bytes,
# so the shapers explain part of it);
# 0.63 in CI beside the docker tier (2026-11-28). These tests
# measure the transport, not the machine's load: they run alone (marker quiet). Alone is not idle:
# a halted vCPU wakes for the shapers' timers late, and this test failed 3 of 4 runs on a quiet VM
# (0.42 of line in CI, 2026-12-02) until the lab held the CPUs awake (procs.cpus_awake): 9 of 9.
@pytest.mark.quiet
def test_roce_allreduce_is_correct_and_keeps_the_line_busy(mini):
    m = bench(mini, "roce")
    assert m.wrong == 0
    assert m.line_fraction(mini.fabric.rate_bps) >= 0.7, m  # 0.95 measured; a loose floor
    assert m.transport["retrans_bytes"] == 0 and m.transport["timeouts"] == 0, m.transport


def _summary(m) -> str:
    """A measurement in one line: what a failure message needs to tell the machine from the transport."""
    stats = {k: m.transport.get(k) for k in ("ecn_marked", "cnps_received", "naks_sent", "retrans_packets",
                                              "timeouts")} if m.transport else {}
    return f"busbw {m.busbw / 1e6:.1f} MB/s, {m.time_s:.3f} s an iteration, {stats}"


# Under loss the first timeout is 0.27 s (ib_timeout 16), not NCCL's 4.3 s: go-back-N still resends
# a window per NAK, but a run is no longer a random sum of 4.3 s timeouts. At 20, 3-7 timeouts made
# the lossy bench take 10-40 s here, and a CI run under load (the ranks' sockets overflow, more
# losses) passed the bench's 147 s (2026-11-27).
# Without congestion control (cc none): the claim is the loss recovery's, and DCQCN made the healthy
# reference the machine's. In two CI runs of 2026-12-02 the healthy RoCE run on this idle fabric
# saw 1,149 ECN marks and 273 CNPs (queues the loaded machine's shapers built), ran at 19.6 MB/s
# against 21-23 alone, and the ratio came out 0.80 and 0.82 (alone 0.53-0.70).
LOSSY_TIMER = {"ib_timeout": 16, "cc": "none"}
# What a loss costs go-back-N depends on where it falls (a lost message tail waits for a timeout):
# over 3 iterations RoCE kept 0.49-0.75 of its healthy busbw, TCP 0.80-0.97, and the margin
# between them failed a CI run. The mean over 8 kept 0.55-0.59 and 0.86-0.93 (3 runs, alone).
# Since a host NIC sends its NAKs ahead of its queued data (model/queue_tree.py), a NAK comes
# back sooner and go-back-N resends a shorter window (17 packets a NAK): RoCE kept 0.56, 0.65
# and 0.73 (CI, 2026-11-29), TCP 0.94, 0.86 and 0.83. Less than TCP every time, but not by 0.15:
# the claim is the order and the mechanism (a window a NAK, a timeout a lost tail), not a margin.
LOSSY_ITERS = 8


@pytest.mark.quiet
def test_one_percent_loss_costs_roce_more_than_tcp(mini):
    def measured(transport):
        return bench(mini, transport, LOSSY_ITERS, **(LOSSY_TIMER if transport == "roce" else {}))

    healthy_runs = {t: measured(t) for t in ("roce", "tcp")}
    healthy = {t: healthy_runs[t].busbw for t in healthy_runs}
    timing, params = engine.parse({"id": "lossy", "kind": "silent_drop", "link": "leaf-g1-r1 -- host-g1-h1",
                                   "loss_pct": 1})
    engine.inject(FaultContext(mini), timing, params)
    try:
        lossy = {t: measured(t) for t in ("roce", "tcp")}
    finally:
        engine.clear(FaultContext(mini), "lossy")
    assert lossy["roce"].wrong == 0 and lossy["tcp"].wrong == 0
    kept = {t: lossy[t].busbw / healthy[t] for t in healthy}
    # go-back-N resends a window per loss and waits a timeout per lost tail; TCP's selective
    # repeat resends what was lost (LOSSY_ITERS: the figures). Alone on 2026-12-02 (4 runs) RoCE
    # kept 0.53-0.70, TCP 0.88-0.93; one CI run that day kept 0.80 and 0.86 (the lossy RoCE run saw
    # 1,490 ECN marks on a fabric with no other traffic: queues the machine built; cause not found):
    # the message says each run's busbw, marks, CNPs, NAKs and timeouts, so the next one says why.
    why = {f"{state} {t}": _summary(runs[t]) for state, runs in (("healthy", healthy_runs), ("lossy", lossy))
           for t in runs} | {"kept": kept}
    assert kept["roce"] < 0.8 and kept["roce"] < kept["tcp"], why
    assert kept["tcp"] > 0.7, why
    stats = lossy["roce"].transport
    assert stats["naks_sent"] > 0 and stats["retrans_bytes"] > SIZE // 10, stats
    assert stats["retrans_packets"] > 3 * stats["naks_sent"], stats  # a window per NAK, not one packet
    assert stats["timeouts"] > 0, stats  # and lost tails wait for the timer


def test_a_link_down_longer_than_the_retry_budget_is_a_transport_error(mini, tmp_path):
    """host-g1-h1's only link down for 3 s: a budget of 0.47 s (67 + 134 + 268 ms) runs out, one
    of minutes does not."""
    scenario = tmp_path / "budgets.yaml"
    job = {"kind": "allreduce", "transport": "roce", "size": "4MiB", "timeout_s": 60}
    scenario.write_text(json.dumps({
        "name": "budgets", "lab": "mini", "duration_s": 14, "telemetry_ms": 0,
        "workloads": [{**job, "ib_timeout": 17, "retry_cnt": 7}, {**job, "ib_timeout": 14, "retry_cnt": 2}],
        "faults": [{"id": "cut", "kind": "link_down", "link": "leaf-g1-r1 -- host-g1-h1", "at_s": 4,
                    "duration_s": 3}],
        "expect": [{"no_hang": {"workload": "allreduce-0"}},
                   {"hang": {"workload": "allreduce-1", "cause": "transport_error"}}]}))
    result = twin_cli("run", str(scenario), "--keep", "--results", str(tmp_path / "results"))
    (run_dir,) = (tmp_path / "results").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert result.returncode == 0, [e["message"] for e in report["expectations"]]
    impatient = report["collectives"]["allreduce-1"]
    errors = [h for h in impatient["hang_events"] if h["cause"] == "transport_error"]
    assert errors and all(0.3 < h["waited_s"] < 3.0 for h in errors), errors  # gave up during the outage
    patient = report["collectives"]["allreduce-0"]
    assert patient["hangs"] == 0 and patient["transport_totals"]["timeouts"] > 0  # waited it out
    assert impatient["transport_totals"]["qp_errors"] > 0
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any("retry count exceeded" in e.get("error", "") and "host-g1-h1" in e["error"]
               for e in events if e["kind"] == "hang")  # names the peer's NIC


def test_transport_state_names_a_host_link_from_the_qps_alone(mini, tmp_path):
    """No probes run. A RoCE job on three of mini's hosts: a 2 % drop on the fourth host's link
    (no QP crosses it) gets no verdict; the same drop on a rank's host link is named from the QPs'
    own losses and waits (0.4-0.5 s measured). The job's first timeout is 67 ms (ib_timeout 14):
    at NCCL's 4.3 s a lost message tail stops a 3-rank ring until the timer fires, and the one
    path that lost says nothing of which of its links did; the detector then waits with it."""
    scenario = tmp_path / "qps.yaml"
    drop = {"kind": "silent_drop", "loss_pct": 2, "duration_s": 5}
    scenario.write_text(json.dumps({
        "name": "qps", "lab": "mini", "duration_s": 16, "telemetry_ms": 0,
        "workloads": [{"kind": "allreduce", "transport": "roce", "size": "4MiB", "timeout_s": 60, "ib_timeout": 14,
                       "ranks": ["host-g1-h2:nic1", "host-g2-h1:nic1", "host-g2-h2:nic1"]}],
        "faults": [{**drop, "id": "elsewhere", "link": "leaf-g1-r1 -- host-g1-h1", "at_s": 3},
                   {**drop, "id": "crossed", "link": "leaf-g2-r1 -- host-g2-h1", "at_s": 9}],
        "detectors": [{"builtin": "transport-state"}],
        "expect": [{"detect": {"fault": "crossed", "within_s": 2}}, {"max_wrong_verdicts": 0}]}))
    result = twin_cli("run", str(scenario), "--keep", "--results", str(tmp_path / "results"))
    (run_dir,) = (tmp_path / "results").iterdir()
    report = json.loads((run_dir / "report.json").read_text())
    assert result.returncode == 0, [e["message"] for e in report["expectations"]]
    assert set(report["detectors"]["transport-state"]["detect_s"]) == {"crossed"}


@pytest.mark.parametrize("multipath", [False, True])
def test_a_multipath_qp_spreads_over_an_ecmp_fabric_by_its_source_ports(mini, multipath):
    """One QP streaming from a host under leaf-g2-r1 to one under leaf-g1-r1 on mini (ECMP): a
    multipath QP's data leaves from ENTROPY source ports, so the kernel's hash puts it on both of
    the leaf's uplinks; an RC QP's one 5-tuple keeps one. (Every value hashed onto one uplink:
    once in 2 ** (ENTROPY - 1) runs.)"""
    nics = {n.label: n for n in fabric_nics(mini.fabric)}
    ports = uplinks(mini.fabric, "leaf-g2-r1")

    def sent() -> list[int]:
        with CounterReader(mini) as reader:
            snap = reader.read(checksums=False)
        return [snap.interfaces[(p.node, p.ifname)]["tx_packets"] for p in ports]

    before = sent()
    result = roce_incast(mini, [nics["host-g2-h1:nic1"]], nics["host-g1-h1:nic1"], 1.5, multipath=multipath)
    each = sorted(after - first for first, after in zip(before, sent()))
    # Enough of a stream to judge its spread (the uplinks also carry BGP and BFD: a few packets a
    # second). Not a rate: how fast one Python QP streams is the machine's (CI's parallel tier of
    # 2026-12-02: 0.2 of line beside the other worker, 16 MB; alone, 4 of 12 runs under 0.5 without
    # the lab's CPU latency request, 1 of 14 with it), and the multipath section of
    # docs/benchmarks.md measures it.
    assert sum(each) >= 500, (each, result.received[-1])
    assert result.stats["timeouts"] == 0, result.stats
    if multipath:
        assert each[0] >= 0.5 / ENTROPY * sum(each), each
    else:
        assert each[0] <= 0.05 * sum(each), each
