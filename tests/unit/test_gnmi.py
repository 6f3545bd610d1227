"""The gNMI server against a real gNMI client (pygnmi) over gRPC, on a source whose counters the
test sets: what Capabilities, Get and Subscribe answer, and what they refuse."""

import threading
import time

import grpc
import pytest
from pygnmi.client import gNMIclient, gNMIException
from pygnmi.spec.v080 import gnmi_pb2, gnmi_pb2_grpc

from twin.errors import TwinError
from twin.telemetry import gnmi, openconfig

IN_OCTETS = "interfaces/interface[name=sp-1]/state/counters/in-octets"
SESSION = ("network-instances/network-instance[name=default]/protocols/protocol[identifier=BGP][name=BGP]/bgp/"
           "neighbors/neighbor[neighbor-address=10.0.0.1]/state/session-state")


class Lab:
    name = "fake"


class Source:
    """Two nodes; `counters` and `bgp` are what the next snapshot holds."""
    lab = Lab()
    nodes = ["leaf-1", "spine-1"]
    period_s = 0.05

    def __init__(self):
        self.counters = {("leaf-1", "sp-1"): {"rx_bytes": 100, "tx_bytes": 7, "ecn_marked": 3,
                                              "pfc_queue_bytes": -9014},
                         ("spine-1", "lf-1"): {"rx_bytes": 7, "tx_bytes": 100}}
        self.bgp = {"leaf-1": {"10.0.0.1": "Established"}}
        self.bgp_wanted = threading.Event()

    def want_bgp(self, wait_s):
        self.bgp_wanted.set()

    def snapshot(self):
        leaves = {node: {} for node in self.nodes}
        for node, mine in openconfig.interface_leaves(self.counters).items():
            leaves[node].update(mine)
        for node, mine in openconfig.bgp_leaves(self.bgp).items():
            leaves[node].update(mine)
        return time.time_ns(), leaves


# pygnmi's reader thread raises CANCELLED when a stream it reads is closed: the client's own noise
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


@pytest.fixture
def served():
    source = Source()
    server, port = gnmi.serve(source, 0)
    try:
        with gNMIclient(target=("127.0.0.1", port), insecure=True) as client:
            yield source, client
    finally:
        server.stop(grace=0).wait()


def test_capabilities_name_the_models_and_encodings(served):
    _, client = served
    answer = client.capabilities()
    assert {m["name"] for m in answer["supported_models"]} >= {"openconfig-interfaces", "fabric-twin-qos"}
    assert {"json", "json_ietf", "proto"} <= set(answer["supported_encodings"])


def test_get_answers_a_container_with_its_leaves_for_the_target_only(served):
    _, client = served
    got = client.get(path=["/interfaces/interface[name=*]/state/counters"], target="leaf-1", encoding="json_ietf")
    (notification,) = got["notification"]
    values = {u["path"]: u["val"] for u in notification["update"]}
    assert values == {IN_OCTETS: 100, "interfaces/interface[name=sp-1]/state/counters/out-octets": 7}
    queue = client.get(path=["/qos/interfaces/interface[interface-id=sp-1]/output/queues/queue[name=data]/state/"
                             "ecn-marked-pkts"], target="leaf-1", encoding="json_ietf")
    assert [u["val"] for u in queue["notification"][0]["update"]] == [3]
    # a queue counted at two hooks can read below 0 for an instant: sent signed, not refused
    occupancy = client.get(path=["/qos/interfaces/interface/output/queues/queue/state/queue-octets"], target="leaf-1",
                           encoding="json_ietf")
    assert [u["val"] for u in occupancy["notification"][0]["update"]] == [-9014]


def test_get_refuses_an_unknown_target_and_a_path_with_nothing_under_it(served):
    _, client = served
    with pytest.raises(gNMIException, match="no node 'leaf-9'"):
        client.get(path=["/interfaces"], target="leaf-9", encoding="json_ietf")
    with pytest.raises(gNMIException, match="no leaf under /interfaces/interface\\[name=nope\\]"):
        client.get(path=["/interfaces/interface[name=nope]"], target="leaf-1", encoding="json_ietf")


def next_update(subscription, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = subscription.get_update(timeout=timeout_s)
        if "update" in message:
            return message["update"]
    raise AssertionError("no update")


def test_a_sampled_stream_follows_the_counters_and_a_session_comes_on_change(served):
    source, client = served
    request = {"mode": "stream", "encoding": "json_ietf",
               "subscription": [{"path": "/interfaces/interface/state/counters/in-octets", "mode": "sample",
                                 "sample_interval": 50_000_000},
                                {"path": "/network-instances", "mode": "on_change"}]}
    subscription = client.subscribe_stream(subscribe=request, target="leaf-1")
    try:
        first = next_update(subscription)
        assert {u["path"]: u["val"] for u in first["update"]} == {IN_OCTETS: 100, SESSION: "ESTABLISHED"}
        assert source.bgp_wanted.is_set()
        source.counters[("leaf-1", "sp-1")]["rx_bytes"] = 250
        source.bgp["leaf-1"]["10.0.0.1"] = "Active"
        seen: dict = {}
        deadline = time.monotonic() + 5
        while seen.get(IN_OCTETS) != 250 or SESSION not in seen:
            assert time.monotonic() < deadline, seen
            seen.update({u["path"]: u["val"] for u in next_update(subscription)["update"]})
        assert seen[SESSION] == "ACTIVE"
        # on change: the unchanged session is not sent again, the sampled counter is
        later = [next_update(subscription) for _ in range(3)]
        assert all({u["path"] for u in n["update"]} == {IN_OCTETS} for n in later), later
    finally:
        subscription.close()


def test_a_sample_interval_below_the_sampling_period_is_refused_with_the_period():
    server, port = gnmi.serve(Source(), 0)
    request = gnmi_pb2.SubscribeRequest(subscribe=gnmi_pb2.SubscriptionList(
        prefix=gnmi_pb2.Path(target="leaf-1"), mode=gnmi_pb2.SubscriptionList.STREAM, encoding=gnmi_pb2.JSON_IETF,
        subscription=[gnmi_pb2.Subscription(path=gnmi_pb2.Path(elem=[gnmi_pb2.PathElem(name="interfaces")]),
                                            mode=gnmi_pb2.SAMPLE, sample_interval=1_000_000)]))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.RpcError) as refused:
                list(gnmi_pb2_grpc.gNMIStub(channel).Subscribe(iter([request]), timeout=5))
    finally:
        server.stop(grace=0).wait()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "below the lab's sampling period (50 ms): ask for 50000000 ns" in refused.value.details()


def test_once_sends_every_node_then_syncs(served):
    _, client = served
    out_octets = {"path": "/interfaces/interface/state/counters/out-octets"}
    answer = client.subscribe2(subscribe={"mode": "once", "encoding": "json_ietf", "subscription": [out_octets]})
    messages = []
    for message in answer:
        messages.append(message)
        if message.get("sync_response"):
            break
    values = {u["path"]: u["val"] for m in messages if "update" in m for u in m["update"]["update"]}
    assert values == {"interfaces/interface[name=sp-1]/state/counters/out-octets": 7,
                      "interfaces/interface[name=lf-1]/state/counters/out-octets": 100}
    assert messages[-1] == {"sync_response": True} and len(messages) == 3  # a notification per node, then sync


def test_a_taken_port_is_refused_with_a_hint():
    first, port = gnmi.serve(Source(), 0)
    try:
        with pytest.raises(TwinError, match=f"cannot listen on 127.0.0.1:{port}") as refused:
            gnmi.serve(Source(), port)
        assert "--gnmi-port" in refused.value.hint
    finally:
        first.stop(grace=0).wait()


def test_path_patterns_match_as_gnmi_wildcards_do():
    leaf = (openconfig.elem("interfaces"), openconfig.elem("interface", name="sp-1"), openconfig.elem("state"))
    assert openconfig.matches((openconfig.elem("interfaces"),), leaf)
    assert openconfig.matches((openconfig.elem("*"), openconfig.elem("interface", name="*")), leaf)
    assert openconfig.matches((openconfig.elem("..."), openconfig.elem("state")), leaf)
    assert not openconfig.matches((openconfig.elem("interfaces"), openconfig.elem("interface", name="sp-2")), leaf)
    assert not openconfig.matches((*leaf, openconfig.elem("counters")), leaf)
