"""Congestion control on a real lab (issue 29): switch queues mark ECN-capable packets above kmin
and not below; TCP hears of the marks (ECN negotiated by the hosts) and slows down before PFC has
to pause it; a RoCE incast with DCQCN pauses far less than without and drops nothing."""


import pytest

from twin.collectives.incast import roce_incast
from twin.lab.kernel.offload import snmp
from twin.lab.pfc.client import port_counters_now
from twin.lab.traffic import tcp_incast
from twin.model.nics import fabric_nics

from .helpers import lab_running, marking
from .test_pfc import queue_drops

pytestmark = pytest.mark.integration
SECONDS = 4.0
BOTTLENECK = ("leaf-g1-r1", "hs-g1h1")  # the queue toward the incast's receiver


@pytest.fixture(scope="module")
def mini():
    with lab_running("mini", "netns") as lab:
        yield lab


def _senders(lab):
    nics = {n.label: n for n in fabric_nics(lab.fabric)}
    return [nics["host-g1-h2:nic1"], nics["host-g2-h1:nic1"], nics["host-g2-h2:nic1"]], nics["host-g1-h1:nic1"]


def _delivered_ce(lab, senders) -> int:
    return sum(snmp(lab.netns(n.host), "netstat").get("TcpExt.TCPDeliveredCE", 0) for n in senders)


def _tcp_incast(lab) -> dict:
    """Pauses, marks (all queues, and the bottleneck's), CE marks TCP's senders heard of, drops.
    One flow a sender: TCP never sends less than two segments a flow, so a dozen jumbo-frame flows
    into one port hold 216 KB in flight, over XOFF, however hard they are marked."""
    senders, receiver = _senders(lab)
    before, ce, drops = port_counters_now(lab.paths.root), _delivered_ce(lab, senders), queue_drops(lab)
    result = tcp_incast(lab, senders, receiver, SECONDS, flows_per_sender=1)
    after = port_counters_now(lab.paths.root)
    return {"pauses": sum(c.rx_pause - before[k].rx_pause for k, c in after.items()),
            "marks": sum(c.ecn_marked - before[k].ecn_marked for k, c in after.items()),
            "bottleneck_marks": after[BOTTLENECK].ecn_marked - before[BOTTLENECK].ecn_marked,
            "delivered_ce": _delivered_ce(lab, senders) - ce, "drops": queue_drops(lab) - drops,
            "goodput": result.goodput_bps / lab.fabric.rate_bps}


def test_tcp_incast_is_marked_above_kmin_and_pauses_less_than_pfc_alone(mini):
    assert mini.fabric.ecn  # marking on by default on a lossless lab
    with marking(mini, kmin=0):  # PFC alone
        alone = _tcp_incast(mini)
    marked = _tcp_incast(mini)  # the lab as shipped: PFC and ECN
    with marking(mini, kmin=50_000_000, kmax=60_000_000):  # above anything a queue holds: no mark
        unreachable = _tcp_incast(mini)
    assert alone["marks"] == 0 and unreachable["marks"] == 0 and unreachable["delivered_ce"] == 0, (alone, unreachable)
    assert marked["bottleneck_marks"] > 0 and marked["delivered_ce"] > 0, marked  # TCP heard of them
    assert alone["pauses"] > 0 and marked["pauses"] < alone["pauses"] / 2, (alone, marked)
    assert marked["drops"] == alone["drops"] == 0
    # Slowing down cost the bottleneck nothing: against PFC alone on the same lab just before, not
    # against line rate, which the machine's other work lowers for both (a CI neighbour's collective
    # made one marked run 0.58 of line; marked against alone was 0.935-1.013 in 8 runs)
    assert alone["goodput"] > 0.5 and marked["goodput"] >= 0.9 * alone["goodput"], (alone, marked)


def _host_drops(lab, nics) -> dict:
    """Where a host, not the fabric, can lose a datagram: its sockets' receive buffers (per
    namespace), and the machine's per-CPU backlog that veth hands packets to (softnet_stat)."""
    rcvbuf = sum(snmp(lab.netns(n.host)).get("Udp.RcvbufErrors", 0) for n in nics)
    with open("/proc/net/softnet_stat") as handle:
        backlog = sum(int(line.split()[1], 16) for line in handle)
    return {"rcvbuf": rcvbuf, "backlog": backlog}


def _roce_incast(lab, cc: str) -> tuple[int, int, object]:
    senders, receiver = _senders(lab)
    before, drops, host = port_counters_now(lab.paths.root), queue_drops(lab), _host_drops(lab, [receiver, *senders])
    result = roce_incast(lab, senders, receiver, SECONDS, cc=cc)
    after = port_counters_now(lab.paths.root)
    host = {key: value - host[key] for key, value in _host_drops(lab, [receiver, *senders]).items()}
    result.stats["host_drops"] = host
    return sum(c.rx_pause - before[k].rx_pause for k, c in after.items()), queue_drops(lab) - drops, result


@pytest.mark.quiet
def test_a_roce_incast_with_dcqcn_pauses_far_less_than_without_and_drops_nothing(mini):
    none_pauses, none_drops, none = _roce_incast(mini, "none")
    dcqcn_pauses, dcqcn_drops, dcqcn = _roce_incast(mini, "dcqcn")
    # Nothing is dropped, by a queue or by a host's socket buffers, and nothing is resent, as on a
    # lossless fabric of hardware NICs. Under load the emulation can resend a packet with no drop
    # anywhere (CI, with the docker tier beside it: 2 packets; here about one incast in 60 under
    # that load, none alone, no kernel drop traced, once with no duplicate at the receiver, so a
    # loss rather than a reordering): cause not found yet, so the test runs alone (marker quiet).
    for run, drops in ((none, none_drops), (dcqcn, dcqcn_drops)):
        stats = run.stats
        assert drops == 0 and stats["host_drops"]["rcvbuf"] == 0 and stats["retrans_packets"] == 0, \
            {key: stats[key] for key in ("retrans_packets", "naks_sent", "out_of_order", "duplicates", "host_drops")}
    assert none.stats["cnps_received"] == 0 and dcqcn.stats["cnps_received"] > 0, (none.stats, dcqcn.stats)
    assert none_pauses > 0 and dcqcn_pauses < none_pauses / 5, (none_pauses, dcqcn_pauses)
    assert dcqcn.goodput_bps() >= 0.85 * mini.fabric.rate_bps, dcqcn.goodput_bps()
