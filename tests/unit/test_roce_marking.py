"""What a RoCE NIC's packets say to an adaptive fabric (roce/nic.py): a multipath NIC marks them
reorderable and repeats selectively; `multipath: rc` marks them and keeps RC's go-back-N (the
comparison issue 30 asks for); an RC NIC marks nothing."""

import socket

import pytest

from twin.roce import wire
from twin.roce.nic import Nic, multipath_modes, multipath_setting
from twin.roce.qp import QueuePair, Timers
from twin.roce.selective import SelectiveQueuePair
from twin.workloads.collective import CollectiveParams


@pytest.mark.parametrize(("multipath", "marked", "queue_pair"), [
    (False, False, QueuePair), (True, True, SelectiveQueuePair), ("rc", True, QueuePair)])
def test_a_nic_marks_its_packets_reorderable_as_the_job_says(multipath, marked, queue_pair):
    setting = multipath_setting(CollectiveParams(transport="roce", multipath=multipath).multipath)
    nic = Nic("127.0.0.1", "lo", 9000, Timers(0.1, 7), **multipath_modes(setting))
    try:
        nic.open_qp(1)
        endpoint = nic.endpoints[1]
        dscp = endpoint.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) >> 2
        assert (dscp == wire.REORDERABLE_DSCP) is marked
        assert type(endpoint.qp) is queue_pair
    finally:
        nic.close()


def test_multipath_takes_true_false_or_rc_and_nothing_else():
    with pytest.raises(ValueError, match="multipath"):
        CollectiveParams(transport="roce", multipath="yes")
